// Argo CD's API as the logged-in user calls it: the session cookie goes with every request
// (same origin), so the tab has exactly the user's Argo CD rights and none of its own.

export interface Application {
  metadata: { name: string; namespace?: string };
  spec: { project?: string };
}

export interface ResourceRef {
  group: string;
  version: string;
  kind: string;
  namespace: string;
  name: string;
}

export class ApiError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

async function answer(response: Response): Promise<any> {
  const text = await response.text();
  let body: any = {};
  try {
    body = text ? JSON.parse(text) : {};
  } catch {
    body = { message: text };
  }
  if (!response.ok) {
    const why = body.message || body.error || response.statusText;
    throw new ApiError(response.status, `${response.status}: ${why}`);
  }
  return body;
}

function appQuery(app: Application): URLSearchParams {
  const q = new URLSearchParams();
  if (app.metadata.namespace) {
    q.set("appNamespace", app.metadata.namespace);
  }
  return q;
}

/** A resource of the application as Argo CD serves it (the live manifest). */
export async function getResource(app: Application, ref: ResourceRef): Promise<any> {
  const q = appQuery(app);
  q.set("namespace", ref.namespace);
  q.set("resourceName", ref.name);
  q.set("version", ref.version);
  q.set("kind", ref.kind);
  q.set("group", ref.group);
  const response = await fetch(
    `/api/v1/applications/${encodeURIComponent(app.metadata.name)}/resource?${q}`,
    { credentials: "same-origin" },
  );
  const body = await answer(response);
  return JSON.parse(body.manifest);
}

/** Runs a resource action (the same as the Actions menu). */
export async function runAction(app: Application, ref: ResourceRef, action: string): Promise<void> {
  const body = {
    appNamespace: app.metadata.namespace || "",
    namespace: ref.namespace,
    resourceName: ref.name,
    version: ref.version,
    group: ref.group,
    kind: ref.kind,
    action,
    project: app.spec.project || "default",
    resourceActionParameters: [],
  };
  const response = await fetch(
    `/api/v1/applications/${encodeURIComponent(app.metadata.name)}/resource/actions/v2`,
    {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    },
  );
  await answer(response);
}
