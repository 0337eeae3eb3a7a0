// The pending plan's text, as `terraform show` prints it, cut into what the tab shows: the
// lines before the first resource, one block per resource (folded when the plan is long), and
// the rest (the "Plan:" line, output changes). Each line knows the change its symbol marks, so
// it can be coloured as Terraform colours it.

/** What a line's leading symbol says, as Terraform marks it. */
export type Mark = "create" | "update" | "destroy" | "replace" | "read" | "none";

/** A resource's block: its `# <address> will be …` line and the lines up to the next one. */
export interface ResourceBlock {
  address: string;
  action: Mark;
  lines: string[];
}

/** A plan cut into its parts. */
export interface PlanParts {
  head: string[];
  resources: ResourceBlock[];
  tail: string[];
}

/** The symbol at the start of `line` (after indentation) and what it marks. */
export function markOf(line: string): { symbol: string; mark: Mark } {
  const m = /^\s*(-\/\+|\+\/-|<=|[+~-])\s/.exec(line);
  if (!m) {
    return { symbol: "", mark: "none" };
  }
  const symbol = m[1];
  const mark: Mark =
    symbol === "+" ? "create" : symbol === "~" ? "update" : symbol === "-" ? "destroy" : symbol === "<=" ? "read" : "replace";
  return { symbol, mark };
}

// `  # aws_instance.web must be replaced` (not `  # (config refers to …)`, a note under one).
const RESOURCE = /^\s{2}# ([A-Za-z_][^\s]*) (.*)$/;

function actionOf(words: string): Mark {
  if (/must be replaced|will be replaced/.test(words)) return "replace";
  if (/will be created/.test(words)) return "create";
  if (/will be destroyed/.test(words)) return "destroy";
  if (/will be updated in-place/.test(words)) return "update";
  if (/will be read during apply/.test(words)) return "read";
  return "none";
}

/** Cuts `text` into head, resource blocks and tail. */
export function parts(text: string): PlanParts {
  const lines = text.replace(/\n+$/, "").split("\n");
  const out: PlanParts = { head: [], resources: [], tail: [] };
  let current: ResourceBlock | undefined;
  for (const line of lines) {
    const resource = RESOURCE.exec(line);
    if (resource) {
      current = { address: resource[1], action: actionOf(resource[2]), lines: [line] };
      out.resources.push(current);
    } else if (current && (line === "" || /^\s/.test(line) || markOf(line).symbol !== "")) {
      // Indented lines, and a replacement's `-/+ resource …`, which Terraform starts at the
      // margin.
      current.lines.push(line);
    } else if (out.resources.length === 0) {
      out.head.push(line);
    } else {
      current = undefined;
      out.tail.push(line);
    }
  }
  for (const r of out.resources) {
    while (r.lines.length > 1 && r.lines[r.lines.length - 1] === "") {
      r.lines.pop();
    }
  }
  return out;
}

/** "3 to replace, 1 to create" style counts of the blocks' actions, in Terraform's order. */
export function counts(resources: ResourceBlock[]): string {
  const order: [Mark, string][] = [
    ["create", "to create"],
    ["update", "to update in-place"],
    ["replace", "to replace"],
    ["destroy", "to destroy"],
    ["read", "to read"],
  ];
  return order
    .map(([mark, words]) => [resources.filter((r) => r.action === mark).length, words] as const)
    .filter(([n]) => n > 0)
    .map(([n, words]) => `${n} ${words}`)
    .join(", ");
}

/** Plans with more resources than this show each resource folded. */
export const FOLD_OVER = 4;
