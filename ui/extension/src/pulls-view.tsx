// The panel of the plans open pull requests make of the object: a line per pull request, its
// plan folded below, read from the ConfigMaps Argo CD's resource tree lists as the object's.
import { Application, getResource } from "./argocd";
import { PlanView } from "./plan-view";
import { PullPlan, pullPlan, pullPlanNames } from "./pulls";
import { ARGO } from "./style";

const React: any = (window as any).React;
const { useEffect, useState } = React;
const h = React.createElement;

export function PullRequests(props: { app: Application; obj: any; tree: any }) {
  const { app, obj } = props;
  const names = pullPlanNames(props.tree, obj);
  const [read, setRead] = useState({ plans: [] as PullPlan[], error: "" });
  useEffect(() => {
    let live = true;
    const ref = (name: string) => ({ group: "", version: "v1", kind: "ConfigMap", namespace: obj.metadata.namespace, name });
    Promise.all(names.map((n) => getResource(app, ref(n)))).then(
      (maps) => live && setRead({ plans: maps.map(pullPlan), error: "" }),
      (e: Error) => live && setRead({ plans: [], error: e.message }),
    );
    return () => {
      live = false;
    };
  }, [names.join(","), obj.metadata.resourceVersion]);
  const configured = obj.spec && obj.spec.sourceRef && obj.spec.sourceRef.pullRequests;
  if (read.error) {
    return h("p", { className: "tfops-error", role: "alert", style: { color: ARGO.failed } }, `The pull requests' plans could not be read: ${read.error}`);
  }
  if (!names.length) {
    return h("p", { className: "tfops-pulls-none" }, configured ? "No open pull request changes this object's files." : "Pull requests are not planned (spec.sourceRef.pullRequests is not set).");
  }
  return h(
    "div",
    { className: "tfops-pulls" },
    read.plans.map((p: PullPlan) =>
      h(
        "details",
        { key: p.number, className: "tfops-pull", "data-number": p.number, "data-failed": String(p.failed) },
        h(
          "summary",
          { style: { cursor: "pointer" } },
          h("i", { className: p.failed ? "fa fa-times-circle" : "fa fa-check-circle", style: { color: p.failed ? ARGO.failed : ARGO.success, marginRight: 4 } }),
          h("span", { className: "tfops-pull-line" }, `#${p.number} at ${p.head.slice(0, 12)}: ${p.line}`),
        ),
        p.text ? h(PlanView, { text: p.text }) : null,
      ),
    ),
  );
}
