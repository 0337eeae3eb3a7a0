// The Terraform tab served by a real argocd-server (tests/tests/argocd_real.rs starts it and
// runs this file; it is not part of `npm test`). argocd-server serves /extensions.js from its
// /tmp/extensions (the tab as the extension installer lays it out) and a host page from its
// --staticassets directory, beside where Argo CD's UI would be: the page logs in through the API as
// Argo CD's login page does (POST /api/v1/session; the server sets the argocd.token cookie),
// reads the Application and the Terraform object through the API, and mounts the tab. Argo
// CD's own UI is not here: it cannot be built on this machine (docs/argocd.md).
//
// Environment: TFOPS_ARGOCD_URL, TFOPS_ARGOCD_STATIC (the --staticassets directory),
// TFOPS_ARGOCD_PASSWORD (of both accounts), TFOPS_ARGOCD_PLAN (the pending plan's id),
// TFOPS_SCREENSHOTS (optional).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, cpSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";

const here = dirname(fileURLToPath(import.meta.url));
const url = process.env.TFOPS_ARGOCD_URL;
const password = process.env.TFOPS_ARGOCD_PASSWORD;
const plan = process.env.TFOPS_ARGOCD_PLAN;
const shots = process.env.TFOPS_SCREENSHOTS;
let browser;

const hostPage = `<!doctype html><html><head><meta charset="utf-8"><base href="/">
<title>tfops tab in argocd-server</title>
<link rel="stylesheet" href="/fontawesome/css/all.min.css"><link rel="stylesheet" href="/host.css">
<script src="/react19.js"></script>
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
  (async () => {
    const q = new URLSearchParams(location.search);
    const login = await fetch("/api/v1/session", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ username: q.get("user"), password: q.get("password") }),
    });
    if (!login.ok) { document.body.textContent = "login failed: " + login.status; return; }
    const json = async (path) => {
      const r = await fetch(path);
      if (!r.ok) throw new Error(path + ": " + r.status);
      return r.json();
    };
    const app = await json("/api/v1/applications/infra");
    const live = await json("/api/v1/applications/infra/resource?namespace=team-a&resourceName=infra&version=v1alpha1&kind=Terraform&group=infra.argocd.io");
    const tree = await json("/api/v1/applications/infra/resource-tree");
    const tab = window.registered.find((r) => r.group === "infra.argocd.io" && r.kind === "Terraform");
    window.mountTab(React.createElement(tab.component, { application: app, resource: JSON.parse(live.manifest), tree }), document.getElementById("root"));
  })().catch((e) => { document.body.textContent = "host page: " + e.message; });
</script></body></html>`;

before(async () => {
  const dir = process.env.TFOPS_ARGOCD_STATIC;
  mkdirSync(dir, { recursive: true });
  // argocd-server answers every HTML request but a file's with its built-in index.html (Argo
  // CD's UI, empty in a build from the Go module); a file of the assets directory is served.
  writeFileSync(join(dir, "tfops-tab.html"), hostPage);
  copyFileSync(join(here, "dist", "react19.js"), join(dir, "react19.js"));
  copyFileSync(join(here, "host.css"), join(dir, "host.css"));
  cpSync(join(here, "dist", "fontawesome"), join(dir, "fontawesome"), { recursive: true });
  browser = await chromium.launch({
    executablePath: process.env.TFOPS_CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
});

after(async () => {
  await browser?.close();
});

async function open(user, width = 1280) {
  const page = await browser.newPage({ viewport: { width, height: 900 } });
  const errors = [];
  page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${url}/tfops-tab.html?user=${user}&password=${encodeURIComponent(password)}`);
  await page.waitForSelector(".tfops-tab", { timeout: 30000 }).catch(async (e) => {
    throw new Error(`${e.message}; the page says: ${await page.textContent("body")}`);
  });
  return { page, errors };
}

async function screenshot(page, name) {
  if (shots) {
    mkdirSync(shots, { recursive: true });
    await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  }
}

test("a read-only user sees the pending plan, and Argo CD's RBAC refuses their approval", async () => {
  const { page, errors } = await open("viewer");
  await page.waitForSelector(".tfops-plan");
  assert.match(await page.textContent(".tfops-plan"), /terraform_data\.x will be created/);
  await page.click("button[data-action=approve]");
  await page.waitForSelector(".tfops-error");
  assert.match(await page.textContent(".tfops-error"), /approve failed: 403: permission denied/);
  await screenshot(page, "argocd-viewer-refused");
  assert.deepEqual(errors, []);
  await page.close();
});

test("the admin reads the plan through Argo CD's API and approves it; tfops applies it", async () => {
  for (const width of [1280, 760]) {
    const { page } = await open("admin", width);
    await page.waitForSelector(".tfops-plan");
    await page.waitForSelector(".tfops-history tbody tr");
    // The runs table fits its panel at 1280 px; narrower, it scrolls inside it, not the page.
    const fit = await page.$eval(".tfops-history", (t) => ({
      table: t.scrollWidth,
      box: t.parentElement.clientWidth,
      page: document.documentElement.scrollWidth,
    }));
    assert.ok(fit.page <= width, `at ${width} px the page is ${fit.page} px wide`);
    if (width === 1280) assert.ok(fit.table <= fit.box, `at 1280 px the runs table (${fit.table} px) overflows its panel (${fit.box} px)`);
    await screenshot(page, `argocd-awaiting-approval-${width}`);
    await page.close();
  }
  const { page, errors } = await open("admin");
  await page.waitForSelector(".tfops-plan");
  const shown = await page.textContent(".tfops-plan");
  assert.match(shown, /terraform_data\.x will be created/);
  assert.match(await page.textContent(".tfops-tab"), new RegExp(plan));
  await page.click("button[data-action=approve]");
  await page.waitForSelector(".tfops-action-done");
  // The tab reads the object again as the user reloads it, until tfops has applied.
  const deadline = Date.now() + 180000;
  for (;;) {
    await page.reload();
    await page.waitForSelector(".tfops-ready");
    if (/TerraformAppliedSucceed/.test(await page.textContent(".tfops-ready"))) break;
    assert.ok(Date.now() < deadline, `not applied in time: ${await page.textContent(".tfops-ready")}`);
    await page.waitForTimeout(1000);
  }
  await page.waitForSelector(".tfops-history tbody tr");
  await screenshot(page, "argocd-applied");
  assert.deepEqual(errors, []);
  await page.close();
});
