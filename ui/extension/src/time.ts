// Times as Argo CD's UI shows them: relative ("5 minutes ago"), the exact time on hover.

/** `then` relative to `now`, in the largest whole unit. */
export function ago(then: string, now: number = Date.now()): string {
  const t = Date.parse(then);
  if (Number.isNaN(t)) {
    return then || "-";
  }
  const seconds = Math.round((now - t) / 1000);
  if (seconds < 0) {
    return "just now";
  }
  const units: [number, string][] = [
    [86400, "day"],
    [3600, "hour"],
    [60, "minute"],
    [1, "second"],
  ];
  for (const [size, name] of units) {
    const n = Math.floor(seconds / size);
    if (n >= 1) {
      return `${n} ${name}${n === 1 ? "" : "s"} ago`;
    }
  }
  return "just now";
}

/** The time between two instants: `1m 05s`, `12s`, `2h 03m`; `-` when one is missing. */
export function duration(start: string, finish: string): string {
  const a = Date.parse(start);
  const b = Date.parse(finish);
  if (Number.isNaN(a) || Number.isNaN(b) || b < a) {
    return "-";
  }
  const s = Math.round((b - a) / 1000);
  const pad = (n: number) => String(n).padStart(2, "0");
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${pad(s % 60)}s`;
  return `${Math.floor(s / 3600)}h ${pad(Math.floor((s % 3600) / 60))}m`;
}

/** The exact time, as the hover text says it. */
export function exact(then: string): string {
  const t = Date.parse(then);
  return Number.isNaN(t) ? then : new Date(t).toISOString();
}
