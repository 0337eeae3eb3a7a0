-- The resource actions Argo CD offers on a tfops Terraform object. Each is the edit the
-- actions table of docs/argocd.md describes; one offered only while it can do something.
local actions = {}
local status = obj.status or {}
local plan = status.plan or {}
local lock = status.lock or {}
local annotations = (obj.metadata or {}).annotations or {}
local suspended = (obj.spec ~= nil and obj.spec.suspend == true) or annotations["infra.argocd.io/suspend"] ~= nil

-- An approved plan being applied (Ready says TerraformApplying, or an apply is recorded under
-- way) has nothing left to approve, though status.plan.pending still names it until applied.
local applying = status.activeRun ~= nil and (status.activeRun.planId or "") ~= ""
for _, c in ipairs(status.conditions or {}) do
  if c.type == "Ready" and c.reason == "TerraformApplying" then
    applying = true
  end
end

-- A run under way (the Reconciling condition) can be stopped.
local running = false
for _, c in ipairs(status.conditions or {}) do
  if c.type == "Reconciling" and c.status == "True" then
    running = true
  end
end

actions["approve"] = {
  ["disabled"] = plan.pending == nil or plan.pending == "" or applying,
  ["iconClass"] = "fa fa-fw fa-check",
  ["displayName"] = "Approve plan",
}
actions["replan"] = {
  ["disabled"] = false,
  ["iconClass"] = "fa fa-fw fa-redo",
  ["displayName"] = "Re-plan",
}
actions["reconcile"] = {
  ["disabled"] = false,
  ["iconClass"] = "fa fa-fw fa-sync",
  ["displayName"] = "Reconcile now",
}
actions["suspend"] = {
  ["disabled"] = suspended,
  ["iconClass"] = "fa fa-fw fa-pause",
  ["displayName"] = "Suspend",
  ["params"] = { { ["name"] = "reason" } },
}
actions["resume"] = {
  ["disabled"] = not suspended,
  ["iconClass"] = "fa fa-fw fa-play",
  ["displayName"] = "Resume",
}
actions["force-unlock"] = {
  ["disabled"] = lock.pending == nil or lock.pending == "",
  ["iconClass"] = "fa fa-fw fa-unlock",
  ["displayName"] = "Force-unlock state",
}
actions["cancel"] = {
  ["disabled"] = not running,
  ["iconClass"] = "fa fa-fw fa-stop",
  ["displayName"] = "Stop the run",
}
return actions
