// The pending plan as `terraform show` prints it, its symbols coloured as Terraform colours
// them, each resource's block folded behind its `# <address> will be …` line when the plan is
// long, with a count of the resources and their actions.
import { FOLD_OVER, Mark, PlanParts, counts, markOf, parts } from "./plan";
import { TERRAFORM } from "./style";

const React: any = (window as any).React;
const h = React.createElement;

const COLOUR: Record<Mark, string> = {
  create: TERRAFORM.create,
  update: TERRAFORM.update,
  destroy: TERRAFORM.destroy,
  read: TERRAFORM.read,
  replace: "",
  none: "",
};

/** One line: its symbol coloured (`-/+` as red and green), the rest as it is. */
function Line(props: { line: string }) {
  const line = props.line;
  const { symbol, mark } = markOf(line);
  if (/^\s{2}# \S+ /.test(line)) {
    return h("div", { className: "tfops-plan-line tfops-plan-line--resource", style: { fontWeight: 600 } }, line);
  }
  if (!symbol) {
    return h("div", { className: "tfops-plan-line" }, line || "\u00a0");
  }
  const at = line.indexOf(symbol);
  const coloured =
    mark === "replace"
      ? symbol.split("").map((c, i) =>
          h("span", { key: i, style: { color: c === "-" ? TERRAFORM.destroy : c === "+" ? TERRAFORM.create : undefined } }, c),
        )
      : h("span", { style: { color: COLOUR[mark] } }, symbol);
  return h(
    "div",
    { className: `tfops-plan-line tfops-plan-line--${mark}`, "data-mark": mark },
    line.slice(0, at),
    h("span", { className: "tfops-plan-symbol" }, coloured),
    line.slice(at + symbol.length),
  );
}

function Lines(props: { lines: string[] }) {
  return props.lines.map((l, i) => h(Line, { key: i, line: l }));
}

const PRE = { fontFamily: "monospace", whiteSpace: "pre" as const, background: "#f6f8fa", padding: 8, overflow: "auto", fontSize: 12, lineHeight: "17px" };

export function PlanView(props: { text: string }) {
  const plan: PlanParts = parts(props.text);
  const fold = plan.resources.length > FOLD_OVER;
  return h(
    "div",
    { className: "tfops-plan", style: PRE },
    h(Lines, { lines: plan.head }),
    plan.resources.length
      ? h("div", { className: "tfops-plan-count", style: { fontWeight: 600, margin: "4px 0" } }, `${plan.resources.length} resource${plan.resources.length === 1 ? "" : "s"}: ${counts(plan.resources)}`)
      : null,
    plan.resources.map((r, i) =>
      fold
        ? h(
            "details",
            { key: i, className: "tfops-plan-resource", "data-address": r.address, "data-action": r.action },
            h(
              "summary",
              { style: { cursor: "pointer" } },
              h("span", { className: "tfops-plan-line tfops-plan-line--resource", style: { fontWeight: 600 } }, r.lines[0].trimStart()),
              h("span", { className: "tfops-plan-resource-lines", style: { color: "#6D7F8B" } }, `  (${r.lines.length - 1} lines)`),
            ),
            h(Lines, { lines: r.lines.slice(1) }),
          )
        : h("div", { key: i, className: "tfops-plan-resource", "data-address": r.address, "data-action": r.action }, h(Lines, { lines: r.lines })),
    ),
    h(Lines, { lines: plan.resources.length && plan.tail.length ? ["", ...plan.tail] : plan.tail }),
  );
}
