// The Terraform tab: conditions, who planned and who applied, the pending plan as Terraform
// shows it, the plans of open pull requests, outputs, the state lock, the run history, and the approve / re-plan / force-unlock actions, all through Argo
// CD's API as the logged-in user.
import { ApiError, Application, ResourceRef, getResource, runAction } from "./argocd";
import { History } from "./history";
import { Run, applyingPlan, condition, conditions, identities, lock, outputsWritten, pendingPlan, readableNames, runs } from "./model";
import { PlanView } from "./plan-view";
import { PullRequests } from "./pulls-view";
import { ARGO, CELL, HEAD_CELL, SCROLL, TABLE, statusIcon } from "./style";
import { ago, exact } from "./time";

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

function Status(props: { status: string }) {
  const icon = statusIcon(props.status);
  return h(
    "span",
    { className: "tfops-badge", "data-status": props.status },
    h("i", { className: icon.className, style: { color: icon.color, marginRight: 4 } }),
    props.status,
  );
}

function Conditions(props: { obj: any }) {
  const rows = conditions(props.obj).map((c) =>
    h(
      "tr",
      { key: c.type, "data-condition": c.type },
      h("td", { style: CELL }, c.type),
      h("td", { style: CELL }, h(Status, { status: c.status })),
      h("td", { style: CELL }, c.reason),
      h("td", { style: { ...CELL, overflowWrap: "anywhere" } }, c.message),
      h("td", { style: CELL }, c.lastTransitionTime ? h("span", { className: "tfops-time", title: exact(c.lastTransitionTime) }, ago(c.lastTransitionTime)) : "-"),
    ),
  );
  // Narrow windows scroll the table inside its panel, not the page; a long message wraps.
  return h(
    "div",
    { style: SCROLL },
    h(
      "table",
      { className: "tfops-conditions", style: TABLE },
      h("thead", null, h("tr", null, ["Type", "Status", "Reason", "Message", "Since"].map((t) => h("th", { key: t, style: HEAD_CELL }, t)))),
      h("tbody", null, rows),
    ),
  );
}

/** A panel as Argo CD's resource details show them. */
function Panel(props: { title: string; children?: any }) {
  return h(
    "div",
    { className: "white-box", style: { marginBottom: 16 } },
    h("div", { className: "white-box__details" }, h("p", { style: { fontWeight: 600, textTransform: "uppercase", color: ARGO.gray6, fontSize: 12, margin: "0 0 8px" } }, props.title), props.children),
  );
}

export function TerraformTab(props: Props) {
  const obj = props.resource;
  const app = props.application;
  const pending = pendingPlan(obj);
  const applying = applyingPlan(obj);
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
  const button = (name: string, label: string, icon: string, enabled: boolean, primary = false) =>
    h(
      "button",
      {
        key: name,
        className: primary ? "argo-button argo-button--base" : "argo-button argo-button--base-o",
        "data-action": name,
        disabled: !enabled || action.busy !== "",
        onClick: () => run(name),
        style: { marginRight: 8 },
      },
      h("i", { className: icon, style: { marginRight: 4 } }),
      action.busy === name ? `${label}…` : label,
    );

  const ready = condition(obj, "Ready");
  const planCondition = condition(obj, "Plan");
  const outputs: string[] = (obj.status && obj.status.availableOutputs) || [];
  const written = outputsWritten(obj);
  const who = identities(obj);
  const whoText = [who.plannedBy && `last planned by ${who.plannedBy}`, who.appliedBy && `last applied by ${who.appliedBy}`].filter(Boolean).join("; ");
  const error = (text: string) => h("p", { className: "tfops-error", role: "alert", style: { color: ARGO.failed } }, h("i", { className: "fa fa-exclamation-circle", style: { marginRight: 4 } }), text);
  return h(
    "div",
    { className: "tfops-tab", style: { padding: 16 } },
    h(
      Panel,
      { title: `Terraform ${obj.metadata.namespace}/${obj.metadata.name}` },
      h(
        "p",
        { className: "tfops-ready" },
        "Ready: ",
        ready ? h(Status, { status: ready.status }) : "not yet reconciled",
        ready ? ` ${ready.reason}: ${ready.message}` : "",
      ),
      whoText ? h("p", { className: "tfops-identities" }, whoText.charAt(0).toUpperCase() + whoText.slice(1)) : null,
      h(
        "div",
        { className: "tfops-actions", style: { margin: "12px 0" } },
        applying
          ? button("approve", `Applying ${applying}…`, "fa fa-circle-notch fa-spin", false, true)
          : button("approve", pending ? `Approve ${pending}` : "Approve", "fa fa-check", pending !== "", true),
        button("replan", "Re-plan", "fa fa-redo", true),
        button("force-unlock", "Force-unlock", "fa fa-unlock", held.id !== ""),
      ),
      action.done ? h("p", { className: "tfops-action-done" }, h("i", { className: "fa fa-check-circle", style: { color: ARGO.success, marginRight: 4 } }), `${action.done} requested`) : null,
      action.error ? error(action.error) : null,
      held.id ? h("p", { className: "tfops-lock" }, h("i", { className: "fa fa-lock", style: { marginRight: 4 } }), `State lock ${held.id} held by ${held.holder || "an unknown holder"}`) : null,
    ),
    h(Panel, { title: "Conditions" }, h(Conditions, { obj })),
    h(
      Panel,
      { title: applying ? `Applying plan ${applying}` : pending ? `Pending plan ${pending}` : "No plan awaits approval" },
      pending && planCondition ? h("p", { className: "tfops-plan-summary" }, planCondition.message) : null,
      plan.error ? error(`The readable plan could not be read: ${plan.error}`) : null,
      pending && plan.text ? h(PlanView, { text: plan.text }) : null,
    ),
    h(Panel, { title: "Pull requests" }, h(PullRequests, { app, obj, tree: props.tree })),
    h(
      Panel,
      { title: "Outputs" },
      outputs.length ? h("ul", { className: "tfops-outputs" }, outputs.map((o) => h("li", { key: o }, o))) : h("p", null, "No outputs."),
      written ? h("p", { className: "tfops-outputs-written" }, written) : null,
    ),
    h(Panel, { title: "Runs" }, history.error ? error(`The run history could not be read: ${history.error}`) : h(History, { runs: history.runs })),
  );
}
