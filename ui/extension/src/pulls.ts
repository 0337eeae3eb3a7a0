// The plans open pull requests make of the object: ConfigMaps `tfops-pr-<name>-<number>` the
// manager owns through the object, so Argo CD's resource tree lists them as its children.

/** One pull request's plan of the object. */
export interface PullPlan {
  number: number;
  head: string;
  /** `+a ~c -d` with replacements and policy findings, or the failure. */
  line: string;
  failed: boolean;
  /** The plan as Terraform shows it (sensitive values masked by Terraform); empty when it failed. */
  text: string;
}

/** The names of the object's pull-request plan ConfigMaps in `tree` (Argo CD's resource tree), by
 * pull request number. */
export function pullPlanNames(tree: any, obj: any): string[] {
  const prefix = `tfops-pr-${obj.metadata.name}-`;
  const number = (name: string) => Number(name.slice(prefix.length));
  return ((tree && tree.nodes) || [])
    .filter(
      (n: any) =>
        n.kind === "ConfigMap" &&
        n.namespace === obj.metadata.namespace &&
        typeof n.name === "string" &&
        n.name.startsWith(prefix) &&
        /^\d+$/.test(n.name.slice(prefix.length)),
    )
    .map((n: any) => n.name as string)
    .sort((a: string, b: string) => number(a) - number(b));
}

function list(items: string[] | undefined): string {
  return (items || []).join("; ");
}

/** A pull-request plan ConfigMap read back. */
export function pullPlan(map: any): PullPlan {
  const labels = map.metadata.labels || {};
  const annotations = map.metadata.annotations || {};
  const data = map.data || {};
  const outcome = JSON.parse(data["outcome.json"] || "{}");
  let line: string;
  let failed = false;
  if (outcome.outcome === "planned") {
    const s = outcome.summary || {};
    line = `+${s.add || 0} ~${s.change || 0} -${s.destroy || 0}`;
    if ((outcome.replaced || []).length) line += `, replaces ${list(outcome.replaced)}`;
    if ((outcome.denials || []).length) {
      line += `, denied by policy: ${list(outcome.denials)}`;
      failed = true;
    }
    if ((outcome.warnings || []).length) line += `, policy warnings: ${list(outcome.warnings)}`;
  } else if (outcome.outcome === "failed") {
    line = `plan failed (${outcome.reason}): ${outcome.message}`;
    failed = true;
  } else {
    line = "not read: unknown outcome";
    failed = true;
  }
  return {
    number: Number(labels["infra.argocd.io/pull-request"]),
    head: annotations["infra.argocd.io/head-sha"] || "",
    line,
    failed,
    text: outcome.outcome === "planned" ? data["plan.txt"] || "" : "",
  };
}
