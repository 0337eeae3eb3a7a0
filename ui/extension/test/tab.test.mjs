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
    assert.equal(await page.$(".tfops-outputs-written"), null, "written nowhere, nothing said");
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

  test(`React ${react}: an approved plan being applied says so and offers no approval`, async () => {
    server.state.deny = false;
    server.state.actions = [];
    const { page, errors } = await open(react, "applying");
    assert.match(await page.textContent(".tfops-ready"), /Unknown TerraformApplying: applying plan plan-main-9d8e7f6a5b .*approved with the infra\.argocd\.io\/approve annotation at 2026-11-30T10:05:00Z/);
    assert.equal(await page.isEnabled("button[data-action=approve]"), false, "nothing left to approve");
    assert.equal((await page.textContent("button[data-action=approve]")).trim(), "Applying plan-main-9d8e7f6a5b…");
    assert.match(await page.textContent(".tfops-tab"), /Applying plan plan-main-9d8e7f6a5b/);
    assert.doesNotMatch(await page.textContent(".tfops-tab"), /Pending plan/);
    if (react === "19") await screenshot(page, "applying");
    assert.deepEqual(server.state.actions, [], "no action sent");
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
      await page.textContent(".tfops-outputs-written"),
      "Written to Secret vpc-outputs and ConfigMap vpc-values (those not marked sensitive).",
    );
    assert.equal(
      await page.textContent(".tfops-identities"),
      "Last planned by system:serviceaccount:team-a:tf-plan; last applied by system:serviceaccount:team-a:tf-apply",
    );
    const rows = await page.$$eval(".tfops-history tbody tr", (r) => r.map((tr) => [...tr.children].slice(-4, -1).map((td) => td.textContent)));
    // A ServiceAccount by its name in the table (the whole identity on hover, and above).
    assert.deepEqual(rows, [
      ["-", "tf-plan", "-"],
      ["tofu 1.12.6", "tf-plan", "tf-apply"],
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

  test(`React ${react}: a long plan is shown as Terraform shows it, folded by resource with a count`, async () => {
    const { page, errors } = await open(react, "long-plan");
    await page.waitForSelector(".tfops-plan");
    assert.equal(await page.textContent(".tfops-plan-count"), "7 resources: 2 to create, 1 to update in-place, 2 to replace, 1 to destroy, 1 to read");
    const folded = await page.$$eval("details.tfops-plan-resource", (d) => d.map((e) => [e.dataset.address, e.dataset.action, e.open]));
    assert.deepEqual(folded, [
      ["aws_vpc.main", "update", false],
      ["aws_subnet.a", "create", false],
      ["aws_subnet.b", "create", false],
      ["aws_instance.old", "destroy", false],
      ["aws_instance.web", "replace", false],
      ["aws_lb.front", "replace", false],
      ["data.aws_ami.latest", "read", false],
    ]);
    // Folded: the block's lines are hidden until its resource line is clicked.
    const web = "details[data-address='aws_instance.web']";
    assert.equal(await page.isVisible(`${web} .tfops-plan-line--update`), false);
    await page.click(`${web} summary`);
    assert.equal(await page.isVisible(`${web} .tfops-plan-line--update`), true);
    // Terraform's colours: + green, ~ yellow, - red, <= cyan, -/+ red then green.
    const colour = (sel) => page.$eval(sel, (e) => getComputedStyle(e).color);
    assert.equal(await colour("details[data-address='aws_subnet.a'] .tfops-plan-line--create .tfops-plan-symbol span"), "rgb(34, 134, 58)");
    assert.equal(await colour(`${web} .tfops-plan-line--update .tfops-plan-symbol span`), "rgb(176, 136, 0)");
    assert.equal(await colour("details[data-address='aws_instance.old'] .tfops-plan-line--destroy .tfops-plan-symbol span"), "rgb(203, 36, 49)");
    assert.equal(await colour("details[data-address='data.aws_ami.latest'] .tfops-plan-line--read .tfops-plan-symbol span"), "rgb(5, 152, 188)");
    const replace = await page.$$eval(`${web} summary ~ * .tfops-plan-symbol span, ${web} summary .tfops-plan-symbol span`, (s) => s.map((e) => [e.textContent, getComputedStyle(e).color]));
    assert.deepEqual(replace.slice(0, 3), [["-", "rgb(203, 36, 49)"], ["/", "rgb(54, 60, 74)"], ["+", "rgb(34, 134, 58)"]]);
    assert.match(await page.textContent(".tfops-plan"), /Plan: 4 to add, 1 to change, 3 to destroy\./);
    if (react === "19") {
      for (const width of [1280, 760]) {
        await page.setViewportSize({ width, height: 900 });
        await screenshot(page, `long-plan-${width}`);
      }
    }
    assert.deepEqual(errors, []);
    await page.close();
  });

  test(`React ${react}: runs show relative times, durations and their logs`, async () => {
    const { page, errors } = await open(react, "awaiting-approval");
    await page.waitForSelector(".tfops-history tbody tr");
    const first = ".tfops-history tbody tr[data-run='1']";
    assert.match(await page.textContent(`${first} .tfops-time`), /^\d+ (day|hour|minute|second)s? ago$/);
    assert.equal(await page.getAttribute(`${first} .tfops-time`, "title"), "2026-11-30T10:00:00.000Z");
    assert.equal(await page.textContent(`${first} .tfops-duration`), "42s");
    assert.equal(await page.textContent(".tfops-history tbody tr[data-run='2'] .tfops-duration"), "1m 10s");
    assert.equal(await page.$(".tfops-history tbody tr[data-run='2'] .tfops-log-link"), null, "no output kept, no link");
    await page.click(`${first} .tfops-log-link`);
    assert.equal(await page.textContent(".tfops-run-log"), "terraform plan -out=tfplan\nPlan: 1 to add, 1 to change, 0 to destroy.\n");
    assert.equal(await page.textContent(`${first} .tfops-log-link`), "hide log");
    assert.match(await page.$eval(`${first} .tfops-result i`, (e) => e.className), /fa-pause-circle/);
    // Long values short, the whole on hover.
    assert.equal(await page.textContent(`${first} .tfops-revision`), "main@9d8e7f6a5b");
    assert.equal(await page.getAttribute(`${first} .tfops-revision span`, "title"), "main@sha1:9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e");
    assert.equal(await page.textContent(`${first} .tfops-planned-by`), "tf-runner");
    assert.equal(await page.getAttribute(`${first} .tfops-applied-by span`, "title"), "system:serviceaccount:team-a:tf-runner-apply");
    // Argo CD's resource panel at 1280 px holds the whole table (its log open); at 760 px the
    // table scrolls inside its panel and the page itself does not.
    for (const width of [1280, 760]) {
      await page.setViewportSize({ width, height: 900 });
      const fit = await page.$eval(".tfops-history", (t) => {
        const box = t.parentElement;
        return {
          table: t.scrollWidth,
          box: box.clientWidth,
          scrolls: getComputedStyle(box).overflowX === "auto",
          page: document.documentElement.scrollWidth,
        };
      });
      assert.ok(fit.page <= width, `at ${width} px the page is ${fit.page} px wide`);
      assert.ok(fit.scrolls, `at ${width} px the table's panel scrolls`);
      if (width === 1280) assert.ok(fit.table <= fit.box, `at 1280 px the table (${fit.table} px) fits its panel (${fit.box} px)`);
      if (react === "19") await screenshot(page, `runs-${width}`);
    }
    assert.deepEqual(errors, []);
    await page.close();
  });

  test(`React ${react}: a readable plan that cannot be read is reported`, async () => {
    const { page } = await open(react, "plan-missing");
    await page.waitForSelector(".tfops-error");
    assert.match(await page.textContent(".tfops-error"), /The readable plan could not be read: 404: ConfigMap tfplan-default-vpc-readable not found/);
    await page.close();
  });

  test(`React ${react}: the plans of open pull requests, from the object's ConfigMaps in Argo CD's tree`, async () => {
    const { page, errors } = await open(react, "pull-requests");
    await page.waitForSelector(".tfops-pull");
    const lines = await page.$$eval(".tfops-pull-line", (l) => l.map((e) => e.textContent));
    assert.deepEqual(lines, [
      "#3 at 89abcdef0123: plan failed (TFExecPlanFailed): plan: Error: Reference to undeclared input variable",
      "#12 at 0123456789ab: +1 ~0 -0",
    ], "by number; another object's ConfigMap (tfops-pr-vpc-peering-4) is not read");
    assert.equal(await page.getAttribute(".tfops-pull[data-number='3']", "data-failed"), "true");
    await page.click(".tfops-pull[data-number='12'] summary");
    assert.match(await page.textContent(".tfops-pull[data-number='12'] .tfops-plan"), /aws_subnet.b will be created/);
    if (react === "19") await screenshot(page, "pull-requests");
    assert.deepEqual(errors, []);
    await page.close();
  });

  test(`React ${react}: an object that plans no pull requests says so`, async () => {
    const { page } = await open(react, "awaiting-approval");
    await page.waitForSelector(".tfops-pulls-none");
    assert.match(await page.textContent(".tfops-pulls-none"), /spec.sourceRef.pullRequests is not set/);
    await page.close();
  });
}
