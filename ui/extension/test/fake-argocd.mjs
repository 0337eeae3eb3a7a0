// A stand-in for argocd-server, as far as the Terraform tab meets it: the host page (React
// and window.extensionsAPI set up as Argo CD's UI does), /extensions.js wrapping each
// extension file the way argocd-server does, and the API calls the tab makes, answered from a
// fixture. Action requests are recorded; `deny` makes them fail as Argo CD's RBAC does.
import { createServer } from "node:http";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const extension = join(here, "..", "dist", "resources", "tfops", "extension-tfops.js");

const application = {
  metadata: { name: "infra", namespace: "argocd" },
  spec: { project: "default" },
};

function hostPage(react, fixture) {
  return `<!doctype html><html><head><meta charset="utf-8"><title>tfops tab</title>
<link rel="stylesheet" href="/fontawesome/css/all.min.css"><link rel="stylesheet" href="/host.css">
<script src="/react${react}.js"></script>
<script>
  window.extensionsAPI = {
    registerResourceExtension(component, group, kind, title, options) {
      (window.registered = window.registered || []).push({ component, group, kind, title, options });
    },
  };
</script>
<script src="/extensions.js"></script>
</head><body><div id="root"></div>
<script>
  fetch("/fixture/${fixture}").then((r) => r.json()).then((f) => {
    const tab = window.registered.find((r) => r.group === "infra.argocd.io" && r.kind === "Terraform");
    window.mountTab(React.createElement(tab.component, { application: ${JSON.stringify(application)}, resource: f.resource, tree: f.tree || { nodes: [] } }), document.getElementById("root"));
  });
</script></body></html>`;
}

function send(res, code, type, body) {
  res.writeHead(code, { "Content-Type": type });
  res.end(body);
}

/** Starts the server on a free port; `state.fixture` and `state.deny` steer it. */
export async function start() {
  const state = { fixture: "healthy", deny: false, actions: [], cookies: [] };
  const server = createServer((req, res) => {
    const url = new URL(req.url, "http://x");
    const fixture = () => JSON.parse(readFileSync(join(here, "fixtures", `${state.fixture}.json`), "utf8"));
    if (url.pathname === "/") {
      state.fixture = url.searchParams.get("fixture");
      return send(res, 200, "text/html", hostPage(url.searchParams.get("react"), state.fixture));
    }
    if (/^\/react(16|19)\.js$/.test(url.pathname)) {
      return send(res, 200, "application/javascript", readFileSync(join(here, "dist", url.pathname.slice(1))));
    }
    if (url.pathname === "/host.css") {
      return send(res, 200, "text/css", readFileSync(join(here, "host.css")));
    }
    if (url.pathname.startsWith("/fontawesome/") && !url.pathname.includes("..")) {
      const type = url.pathname.endsWith(".css") ? "text/css" : "font/woff2";
      return send(res, 200, type, readFileSync(join(here, "dist", url.pathname.slice(1))));
    }
    if (url.pathname === "/extensions.js") {
      const js = readFileSync(extension, "utf8");
      return send(res, 200, "application/javascript", `try {\n${js}\n} catch (e) {\nconsole.error('Extension tfops failed to load', e);\n}\n`);
    }
    if (url.pathname.startsWith("/fixture/")) {
      return send(res, 200, "application/json", JSON.stringify(fixture()));
    }
    state.cookies.push(req.headers.cookie || "");
    if (req.method === "GET" && url.pathname === "/api/v1/applications/infra/resource") {
      const q = url.searchParams;
      const found = fixture().configMaps.find((m) => m.metadata.name === q.get("resourceName") && q.get("kind") === "ConfigMap" && q.get("namespace") === m.metadata.namespace && q.get("appNamespace") === "argocd");
      if (!found) {
        return send(res, 404, "application/json", JSON.stringify({ error: "not found", code: 5, message: `${q.get("kind")} ${q.get("resourceName")} not found as part of application infra` }));
      }
      return send(res, 200, "application/json", JSON.stringify({ manifest: JSON.stringify(found) }));
    }
    if (req.method === "POST" && url.pathname === "/api/v1/applications/infra/resource/actions/v2") {
      let body = "";
      req.on("data", (d) => (body += d));
      req.on("end", () => {
        const request = JSON.parse(body);
        state.actions.push(request);
        if (state.deny) {
          return send(res, 403, "application/json", JSON.stringify({ error: "permission denied", code: 7, message: `permission denied: applications, action/infra.argocd.io/Terraform/${request.action}, default/infra` }));
        }
        send(res, 200, "application/json", "{}");
      });
      return;
    }
    send(res, 404, "text/plain", "not found");
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { state, url: `http://127.0.0.1:${server.address().port}`, close: () => new Promise((r) => server.close(r)) };
}
