// The Terraform tab in a real browser (Debian's chromium through playwright-core), with React
// 16 and with React 19 as Argo CD's UI provides them, against the argocd-server stand-in of
// fake-argocd.mjs. Screenshots of each state go to ../../../docs/ui/ when TFOPS_SCREENSHOTS
// is set (docs/argocd.md shows them).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { chromium } from "playwright-core";
import { start } from "./fake-argocd.mjs";

const executablePath = process.env.TFOPS_CHROMIUM || "/usr/bin/chromium";
const shots = process.env.TFOPS_SCREENSHOTS;
let server;
let browser;

before(async () => {
  server = await start();
  // Playwright gives each launch a fresh profile of its own (a --user-data-dir of ours is
  // refused by launch()).
  browser = await chromium.launch({
    executablePath,
    headless: true,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
});

after(async () => {
  await browser?.close();
  await server?.close();
});

/** Opens the tab for `fixture` with React `react`; the page and the console errors seen. */
async function open(react, fixture) {
  const page = await browser.newPage({ viewport: { width: 1100, height: 900 } });
  const errors = [];
  // The browser logs every refused request itself; what the tab logs is what counts.
  page.on("console", (m) => m.type() === "error" && !m.text().startsWith("Failed to load resource") && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.goto(`${server.url}/?react=${react}&fixture=${fixture}`);
  await page.waitForSelector(".tfops-tab");
  return { page, errors };
}

async function screenshot(page, name) {
  if (shots) {
    mkdirSync(shots, { recursive: true });
    await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
  }
}

for (const react of ["16", "19"]) {
  test(`React ${react}: a plan awaiting approval is shown whole and approved through Argo CD's action API`, async () => {
    server.state.deny = false;
    server.state.actions = [];
    const { page, errors } = await open(react, "awaiting-approval");
    await page.waitForSelector(".tfops-plan");
    const plan = await page.textContent(".tfops-plan");
    assert.match(plan, /aws_vpc.main will be updated in-place/);
    assert.match(plan, /Plan: 1 to add, 1 to change, 0 to destroy\./, "both chunks, in order");
    assert.match(await page.textContent(".tfops-ready"), /Unknown TerraformPlannedWithChanges/);
    assert.equal(await page.textContent(".tfops-identities"), "Last planned by system:serviceaccount:team-a:tf-plan");
    assert.equal(await page.textContent(".tfops-plan-summary"), "Plan: 1 to add, 1 to change, 0 to destroy.");
    assert.deepEqual(await page.$$eval(".tfops-outputs li", (l) => l.map((e) => e.textContent)), ["vpc_id", "subnet_ids"]);
    await page.waitForSelector(".tfops-history tbody tr");
    assert.equal(await page.$$eval(".tfops-history tbody tr", (r) => r.length), 2);
    assert.equal(await page.isEnabled("button[data-action=force-unlock]"), false);
    if (react === "19") await screenshot(page, "awaiting-approval");
    await page.click("button[data-action=approve]");
    await page.waitForSelector(".tfops-action-done");
    assert.deepEqual(server.state.actions, [
      {
        appNamespace: "argocd",
        namespace: "team-a",
        resourceName: "vpc",
        version: "v1alpha1",
        group: "infra.argocd.io",
        kind: "Terraform",
        action: "approve",
        project: "default",
        resourceActionParameters: [],
      },
    ]);
    assert.deepEqual(errors, []);
    await page.close();
  });

  test(`React ${react}: a healthy object offers no approval and shows its history`, async () => {
    const { page, errors } = await open(react, "healthy");
    await page.waitForSelector(".tfops-history tbody tr");
    assert.equal(await page.isEnabled("button[data-action=approve]"), false);
    assert.equal(await page.isEnabled("button[data-action=replan]"), true);
    assert.equal(await page.$(".tfops-plan"), null);
    assert.match(await page.textContent(".tfops-ready"), /True TerraformAppliedSucceed/);
    assert.equal(
      await page.textContent(".tfops-identities"),
      "Last planned by system:serviceaccount:team-a:tf-plan; last applied by system:serviceaccount:team-a:tf-apply",
    );
    const rows = await page.$$eval(".tfops-history tbody tr", (r) => r.map((tr) => [...tr.children].slice(-3).map((td) => td.textContent)));
    assert.deepEqual(rows, [
      ["-", "system:serviceaccount:team-a:tf-plan", "-"],
      ["tofu 1.12.6", "system:serviceaccount:team-a:tf-plan", "system:serviceaccount:team-a:tf-apply"],
    ]);
    if (react === "19") await screenshot(page, "healthy");
    assert.deepEqual(errors, []);
    await page.close();
  });

  test(`React ${react}: a held lock names its holder, and a refused action shows Argo CD's reason`, async () => {
    server.state.deny = true;
    server.state.actions = [];
    const { page, errors } = await open(react, "lock-held");
    assert.match(await page.textContent(".tfops-lock"), /held by runner vpc-tf-runner/);
    assert.equal(await page.$(".tfops-identities"), null, "no identity recorded, none shown");
    await page.click("button[data-action=force-unlock]");
    await page.waitForSelector(".tfops-error");
    assert.match(await page.textContent(".tfops-error"), /force-unlock failed: 403: permission denied: applications, action\/infra.argocd.io\/Terraform\/force-unlock/);
    assert.equal(server.state.actions[0].action, "force-unlock");
    if (react === "19") await screenshot(page, "lock-held-denied");
    server.state.deny = false;
    assert.deepEqual(errors, []);
    await page.close();
  });

  test(`React ${react}: a readable plan that cannot be read is reported`, async () => {
    const { page } = await open(react, "plan-missing");
    await page.waitForSelector(".tfops-error");
    assert.match(await page.textContent(".tfops-error"), /The readable plan could not be read: 404: ConfigMap tfplan-default-vpc-readable not found/);
    await page.close();
  });
}
