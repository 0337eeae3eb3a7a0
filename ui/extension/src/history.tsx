// The run history: when each run started (relative, the exact time on hover), how long it
// took, what it did, and its kept Terraform output behind a "log" link, the same text
// `tfops logs --run <n>` prints, read through Argo CD's API with the history.
import { Run } from "./model";
import { CELL, HEAD_CELL, TABLE, resultIcon } from "./style";
import { ago, duration, exact } from "./time";

const React: any = (window as any).React;
const { useState } = React;
const h = React.createElement;

const COLUMNS = ["Run", "Started", "Duration", "Trigger", "Revision", "Plan", "Changes", "Result", "Reason", "Binary", "Planned by", "Applied by", "Log"];

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
    h("td", { style: CELL }, r.revision || "-"),
    h("td", { style: CELL }, r.planId || "-"),
    h("td", { style: CELL }, r.summary ? `+${r.summary.add} ~${r.summary.change} -${r.summary.destroy}` : "-"),
    h("td", { style: CELL, className: "tfops-result" }, h("i", { className: icon.className, style: { color: icon.color, marginRight: 4 } }), r.result),
    h("td", { style: CELL }, r.reason),
    h("td", { style: CELL }, r.binary || "-"),
    h("td", { style: CELL }, r.plannedBy || "-"),
    h("td", { style: CELL }, r.appliedBy || "-"),
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
  // Narrow windows scroll the table, not the page.
  return h(
    "div",
    { style: { overflowX: "auto" } },
    h(
      "table",
      { className: "tfops-history", style: TABLE },
      h("thead", null, h("tr", null, COLUMNS.map((t) => h("th", { key: t, style: HEAD_CELL }, t)))),
      h("tbody", null, rows),
    ),
  );
}
