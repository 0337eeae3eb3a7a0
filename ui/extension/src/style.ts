// Argo CD's look, so the tab sits in its UI as its own panels do: the class names of Argo CD's
// panels and buttons (`white-box`, `argo-button argo-button--base`), whose styles the host
// page brings, and Argo CD's status colours and icons (Font Awesome, which its UI loads), as
// its own health and sync icons use them.

export const ARGO = {
  success: "#18BE94",
  warning: "#f4c030",
  failed: "#E96D76",
  running: "#0DADEA",
  suspended: "#766f94",
  gray4: "#CCD6DD",
  gray6: "#6D7F8B",
};

/** Terraform's colours for plan symbols (its CLI's green, yellow, red and cyan). */
export const TERRAFORM = {
  create: "#22863a",
  update: "#b08800",
  destroy: "#cb2431",
  read: "#0598bc",
};

/** The icon and colour of a condition's status, as Argo CD marks success and failure. */
export function statusIcon(status: string): { className: string; color: string } {
  if (status === "True") return { className: "fa fa-check-circle", color: ARGO.success };
  if (status === "False") return { className: "fa fa-times-circle", color: ARGO.failed };
  return { className: "fa fa-question-circle", color: ARGO.warning };
}

/** The icon and colour of a run's result (tfops_core::history: Succeeded, Failed,
 * AwaitingApproval, Waiting). */
export function resultIcon(result: string): { className: string; color: string } {
  switch (result) {
    case "Succeeded":
      return { className: "fa fa-check-circle", color: ARGO.success };
    case "Failed":
      return { className: "fa fa-times-circle", color: ARGO.failed };
    case "AwaitingApproval":
      return { className: "fa fa-pause-circle", color: ARGO.suspended };
    default:
      return { className: "fa fa-clock", color: ARGO.gray6 };
  }
}

/** A table as Argo CD's detail panels show one. */
export const TABLE = { width: "100%", borderCollapse: "collapse" as const };
export const HEAD_CELL = { textAlign: "left" as const, color: ARGO.gray6, fontWeight: 500, textTransform: "uppercase" as const, fontSize: 11, padding: "6px 8px", borderBottom: `1px solid ${ARGO.gray4}` };
/** What holds a table: it scrolls sideways inside its panel when the window is narrow. */
export const SCROLL = { overflowX: "auto" as const };
export const CELL = { padding: "6px 8px", borderBottom: `1px solid #eef2f5`, verticalAlign: "top" as const };
