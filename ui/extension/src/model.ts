// What the tab shows, read from the Terraform object and the ConfigMaps next to it.

export interface Condition {
  type: string;
  status: string;
  reason: string;
  message: string;
  lastTransitionTime?: string;
}

export function conditions(obj: any): Condition[] {
  return (obj.status && obj.status.conditions) || [];
}

export function condition(obj: any, type: string): Condition | undefined {
  return conditions(obj).find((c) => c.type === type);
}

export function pendingPlan(obj: any): string {
  return (obj.status && obj.status.plan && obj.status.plan.pending) || "";
}

/** The plan being applied, when one is (as `TerraformStatus::applying` says): Ready's reason is
 * `TerraformApplying` (an approval taken up, until its apply ends) or an apply is recorded under
 * way. Nothing is left to approve meanwhile, though `status.plan.pending` names it until applied. */
export function applyingPlan(obj: any): string {
  const s = obj.status || {};
  const run = s.activeRun;
  if (run && run.planId) {
    return run.planId;
  }
  const ready = condition(obj, "Ready");
  return ready && ready.reason === "TerraformApplying" ? pendingPlan(obj) : "";
}

export function lock(obj: any): { id: string; holder: string } {
  const l = (obj.status && obj.status.lock) || {};
  return { id: l.pending || "", holder: l.holder || "" };
}

/** Who made the last plan or drift check and who made the last apply (`status.lastPlannedBy`,
 * `status.lastAppliedBy`): two identities when `spec.runner.apply` splits them. */
export function identities(obj: any): { plannedBy: string; appliedBy: string } {
  const s = obj.status || {};
  return { plannedBy: s.lastPlannedBy || "", appliedBy: s.lastAppliedBy || "" };
}

/** Where the outputs were last written (`status.outputsSecret`, `status.outputsConfigMap`), as
 * a sentence; empty when nowhere. */
export function outputsWritten(obj: any): string {
  const s = obj.status || {};
  const places = [
    s.outputsSecret ? `Secret ${s.outputsSecret}` : "",
    s.outputsConfigMap ? `ConfigMap ${s.outputsConfigMap} (those not marked sensitive)` : "",
  ].filter((p) => p !== "");
  return places.length ? `Written to ${places.join(" and ")}.` : "";
}

/** The readable plan ConfigMaps: `tfplan-<workspace>-<name>-readable`, then `-readable-<i>`. */
export function readableNames(obj: any, count: number): string[] {
  const workspace = (obj.status && obj.status.storedPlanWorkspace) || obj.spec.workspace || "default";
  const head = `tfplan-${workspace}-${obj.metadata.name}-readable`;
  const names = [head];
  for (let i = 1; i < count; i++) {
    names.push(`${head}-${i}`);
  }
  return names;
}

/** One entry of the run history (tfops_core::history::RunEntry). */
export interface Run {
  startedAt: string;
  finishedAt: string;
  trigger: string;
  revision?: string;
  planId?: string;
  summary?: { add: number; change: number; destroy: number };
  result: string;
  reason: string;
  message?: string;
  /** The binary and version that ran (`tofu 1.12.6`), once known. */
  binary?: string;
  /** The runner identity that planned (or checked drift) in this run. */
  plannedBy?: string;
  /** The last lines of Terraform's output in this run (what `tfops logs --run` prints). */
  outputTail?: string;
  /** The runner identity that applied in this run (the apply runner's with `spec.runner.apply`). */
  appliedBy?: string;
}

/** The run history kept in ConfigMap `tfhistory-<name>` (key `runs.json`, newest first). */
export function runs(configMap: any): Run[] {
  const text = configMap && configMap.data && configMap.data["runs.json"];
  return text ? JSON.parse(text) : [];
}
