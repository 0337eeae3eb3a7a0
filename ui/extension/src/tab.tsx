// The Terraform tab: conditions, who planned and who applied, the pending plan as Terraform
// shows it, outputs, the state lock, the run history, and the approve / re-plan / force-unlock actions, all through Argo
// CD's API as the logged-in user.
import { ApiError, Application, ResourceRef, getResource, runAction } from "./argocd";
import { Run, condition, conditions, identities, lock, pendingPlan, readableNames, runs } from "./model";

const React: any = (window as any).React;
const { useEffect, useState } = React;
const h = React.createElement;

interface Props {
  application: Application;
  resource: any;
  tree?: any;
}

function refOf(obj: any, kind: string, name: string, group = "", version = "v1"): ResourceRef {
  return { group, version, kind, namespace: obj.metadata.namespace, name };
}

/** The readable plan of the pending plan, from its ConfigMaps (all chunks, in order). */
async function readablePlan(app: Application, obj: any): Promise<string> {
  const [head] = readableNames(obj, 1);
  const first = await getResource(app, refOf(obj, "ConfigMap", head));
  const index = JSON.parse(first.data["index.json"]);
  if (index.planId !== pendingPlan(obj)) {
    throw new Error(`the stored readable plan is ${index.planId}, not the pending one`);
  }
  const names = readableNames(obj, index.chunks.length);
  const rest = await Promise.all(names.slice(1).map((n) => getResource(app, refOf(obj, "ConfigMap", n))));
  return [first, ...rest].map((m) => m.data["plan.txt"]).join("");
}

function Badge(props: { status: string }) {
  const colour = props.status === "True" ? "#18be94" : props.status === "False" ? "#e96d76" : "#f4c030";
  return h("span", { className: "tfops-badge", style: { background: colour, color: "#fff", padding: "0 6px", borderRadius: 3 } }, props.status);
}

function Conditions(props: { obj: any }) {
  return h(
    "table",
    { className: "tfops-conditions" },
    h("thead", null, h("tr", null, ["Type", "Status", "Reason", "Message"].map((t) => h("th", { key: t }, t)))),
    h(
      "tbody",
      null,
      conditions(props.obj).map((c) =>
        h("tr", { key: c.type, "data-condition": c.type }, h("td", null, c.type), h("td", null, h(Badge, { status: c.status })), h("td", null, c.reason), h("td", null, c.message)),
      ),
    ),
  );
}

function History(props: { runs: Run[] }) {
  if (props.runs.length === 0) {
    return h("p", null, "No runs recorded yet.");
  }
  return h(
    "table",
    { className: "tfops-history" },
    h("thead", null, h("tr", null, ["Started", "Trigger", "Revision", "Plan", "Changes", "Result", "Reason", "Binary", "Planned by", "Applied by"].map((t) => h("th", { key: t }, t)))),
    h(
      "tbody",
      null,
      props.runs.map((r, i) =>
        h(
          "tr",
          { key: i },
          h("td", null, r.startedAt),
          h("td", null, r.trigger),
          h("td", null, r.revision || "-"),
          h("td", null, r.planId || "-"),
          h("td", null, r.summary ? `+${r.summary.add} ~${r.summary.change} -${r.summary.destroy}` : "-"),
          h("td", null, r.result),
          h("td", null, r.reason),
          h("td", null, r.binary || "-"),
          h("td", null, r.plannedBy || "-"),
          h("td", null, r.appliedBy || "-"),
        ),
      ),
    ),
  );
}

export function TerraformTab(props: Props) {
  const obj = props.resource;
  const app = props.application;
  const pending = pendingPlan(obj);
  const held = lock(obj);
  const [plan, setPlan] = useState({ text: "", error: "" });
  const [history, setHistory] = useState({ runs: [] as Run[], error: "" });
  const [action, setAction] = useState({ busy: "", done: "", error: "" });

  useEffect(() => {
    let live = true;
    if (pending) {
      readablePlan(app, obj).then(
        (text) => live && setPlan({ text, error: "" }),
        (e: Error) => live && setPlan({ text: "", error: e.message }),
      );
    }
    getResource(app, refOf(obj, "ConfigMap", `tfhistory-${obj.metadata.name}`)).then(
      (m) => live && setHistory({ runs: runs(m), error: "" }),
      (e: Error) => live && setHistory({ runs: [], error: e instanceof ApiError && e.status === 404 ? "" : e.message }),
    );
    return () => {
      live = false;
    };
  }, [pending, obj.metadata.resourceVersion]);

  const run = (name: string) => {
    setAction({ busy: name, done: "", error: "" });
    runAction(app, refOf(obj, "Terraform", obj.metadata.name, "infra.argocd.io", "v1alpha1"), name).then(
      () => setAction({ busy: "", done: name, error: "" }),
      (e: Error) => setAction({ busy: "", done: "", error: `${name} failed: ${e.message}` }),
    );
  };
  const button = (name: string, label: string, enabled: boolean) =>
    h("button", { key: name, className: "argo-button argo-button--base", "data-action": name, disabled: !enabled || action.busy !== "", onClick: () => run(name), style: { marginRight: 8 } }, label);

  const ready = condition(obj, "Ready");
  const planCondition = condition(obj, "Plan");
  const outputs: string[] = (obj.status && obj.status.availableOutputs) || [];
  const who = identities(obj);
  const whoText = [who.plannedBy && `last planned by ${who.plannedBy}`, who.appliedBy && `last applied by ${who.appliedBy}`].filter(Boolean).join("; ");
  return h(
    "div",
    { className: "tfops-tab", style: { padding: 16 } },
    h("h4", null, "Terraform ", obj.metadata.namespace, "/", obj.metadata.name),
    h(
      "p",
      { className: "tfops-ready" },
      "Ready: ",
      ready ? h(Badge, { status: ready.status }) : "not yet reconciled",
      ready ? ` ${ready.reason}: ${ready.message}` : "",
    ),
    whoText ? h("p", { className: "tfops-identities" }, whoText.charAt(0).toUpperCase() + whoText.slice(1)) : null,
    h(
      "div",
      { className: "tfops-actions", style: { margin: "12px 0" } },
      button("approve", pending ? `Approve ${pending}` : "Approve", pending !== ""),
      button("replan", "Re-plan", true),
      button("force-unlock", "Force-unlock", held.id !== ""),
    ),
    action.done ? h("p", { className: "tfops-action-done" }, `${action.done} requested`) : null,
    action.error ? h("p", { className: "tfops-error", role: "alert", style: { color: "#e96d76" } }, action.error) : null,
    held.id ? h("p", { className: "tfops-lock" }, `State lock ${held.id} held by ${held.holder || "an unknown holder"}`) : null,
    h("h5", null, "Conditions"),
    h(Conditions, { obj }),
    h("h5", null, pending ? `Pending plan ${pending}` : "No plan awaits approval"),
    pending && planCondition ? h("p", { className: "tfops-plan-summary" }, planCondition.message) : null,
    plan.error ? h("p", { className: "tfops-error", role: "alert", style: { color: "#e96d76" } }, `The readable plan could not be read: ${plan.error}`) : null,
    pending && plan.text ? h("pre", { className: "tfops-plan", style: { maxHeight: 480, overflow: "auto", background: "#f6f8fa", padding: 8 } }, plan.text) : null,
    h("h5", null, "Outputs"),
    outputs.length ? h("ul", { className: "tfops-outputs" }, outputs.map((o) => h("li", { key: o }, o))) : h("p", null, "No outputs."),
    h("h5", null, "Runs"),
    history.error ? h("p", { className: "tfops-error", role: "alert" }, `The run history could not be read: ${history.error}`) : h(History, { runs: history.runs }),
  );
}
