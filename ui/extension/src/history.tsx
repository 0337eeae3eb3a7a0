// The run history: when each run started (relative, the exact time on hover), how long it
// took, what it did, and its kept Terraform output behind a "log" link, the same text
// `tfops logs --run <n>` prints, read through Argo CD's API with the history.
import { Run } from "./model";
import { CELL, HEAD_CELL, SCROLL, TABLE, resultIcon } from "./style";
import { ago, duration, exact } from "./time";

const React: any = (window as any).React;
const { useState } = React;
const h = React.createElement;

const COLUMNS = ["Run", "Started", "Duration", "Trigger", "Revision", "Plan", "Changes", "Result", "Reason", "Binary", "Planned by", "Applied by", "Log"];

/** A revision as Argo CD shows one in its lists: the reference and the commit's first ten
 * digits (`main@sha1:78236a434ac4…` is `main@78236a434a`); the whole on hover. */
export function shortRevision(revision: string): string {
  const at = revision.indexOf("@");
  if (at < 0) return revision;
  const digest = revision.slice(at + 1);
  const hex = digest.slice(digest.indexOf(":") + 1);
  return `${revision.slice(0, at)}@${hex.slice(0, 10)}`;
}

/** Who ran: a ServiceAccount's name (`system:serviceaccount:team-a:tf-runner` is
 * `tf-runner`, of the object's own namespace or named on hover); the whole on hover. */
export function shortIdentity(identity: string): string {
  const parts = identity.split(":");
  return identity.startsWith("system:serviceaccount:") && parts.length === 4 ? parts[3] : identity;
}

/** A cell whose text is shown short, the whole of it on hover. */
function Short(props: { full?: string; short: (s: string) => string }) {
  return props.full ? h("span", { title: props.full }, props.short(props.full)) : "-";
}

function Row(props: { run: Run; n: number; open: boolean; toggle: () => void }) {
  const r = props.run;
  const icon = resultIcon(r.result);
  const tail = r.outputTail || "";
  return h(
    "tr",
    { "data-run": props.n },
    h("td", { style: CELL }, String(props.n)),
    h("td", { style: CELL }, h("span", { className: "tfops-time", title: exact(r.startedAt) }, ago(r.startedAt))),
    h("td", { style: CELL, className: "tfops-duration" }, duration(r.startedAt, r.finishedAt)),
    h("td", { style: CELL }, r.trigger),
    h("td", { style: CELL, className: "tfops-revision" }, h(Short, { full: r.revision, short: shortRevision })),
    h("td", { style: CELL }, r.planId || "-"),
    h("td", { style: CELL }, r.summary ? `+${r.summary.add} ~${r.summary.change} -${r.summary.destroy}` : "-"),
    h("td", { style: CELL, className: "tfops-result" }, h("i", { className: icon.className, style: { color: icon.color, marginRight: 4 } }), r.result),
    h("td", { style: CELL }, r.reason),
    h("td", { style: CELL }, r.binary || "-"),
    h("td", { style: CELL, className: "tfops-planned-by" }, h(Short, { full: r.plannedBy, short: shortIdentity })),
    h("td", { style: CELL, className: "tfops-applied-by" }, h(Short, { full: r.appliedBy, short: shortIdentity })),
    h(
      "td",
      { style: CELL },
      tail
        ? h("a", { href: `#tfops-run-${props.n}`, className: "tfops-log-link", onClick: (e: any) => { e.preventDefault(); props.toggle(); } }, props.open ? "hide log" : "log")
        : "-",
    ),
  );
}

export function History(props: { runs: Run[] }) {
  const [open, setOpen] = useState(-1);
  if (props.runs.length === 0) {
    return h("p", null, "No runs recorded yet.");
  }
  const rows: any[] = [];
  props.runs.forEach((r, i) => {
    const n = i + 1;
    rows.push(h(Row, { key: `run-${n}`, run: r, n, open: open === n, toggle: () => setOpen(open === n ? -1 : n) }));
    if (open === n) {
      rows.push(
        h(
          "tr",
          { key: `log-${n}` },
          h(
            "td",
            { colSpan: COLUMNS.length, style: CELL },
            h("pre", { id: `tfops-run-${n}`, className: "tfops-run-log", style: { maxHeight: 360, overflow: "auto", background: "#f6f8fa", padding: 8, margin: 0 } }, r.outputTail),
          ),
        ),
      );
    }
  });
  // Long values are shown short (whole on hover) so that the table fits Argo CD's panel at
  // 1280 px; narrower windows scroll the table inside its panel, not the page.
  return h(
    "div",
    { style: SCROLL },
    h(
      "table",
      { className: "tfops-history", style: TABLE },
      h("thead", null, h("tr", null, COLUMNS.map((t) => h("th", { key: t, style: HEAD_CELL }, t)))),
      h("tbody", null, rows),
    ),
  );
}
