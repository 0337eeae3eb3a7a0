-- Approves the pending plan: `infra.argocd.io/approve: <plan id>@<now>` and a reconcile
-- request. The controller applies it only if the plan it makes again is the same one.
local os = require("os")
local status = obj.status or {}
local plan = status.plan or {}
if plan.pending == nil or plan.pending == "" then
  error("no plan is waiting for approval", 0)
end
-- Approving again while the approved plan is applied approves nothing: refused, saying so
-- (Ready says TerraformApplying, or an apply is recorded under way).
local applying = status.activeRun ~= nil and (status.activeRun.planId or "") ~= ""
for _, c in ipairs(status.conditions or {}) do
  if c.type == "Ready" and c.reason == "TerraformApplying" then
    applying = true
  end
end
if applying then
  error("plan " .. plan.pending .. " is already approved and being applied: nothing to approve", 0)
end
local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["infra.argocd.io/approve"] = plan.pending .. "@" .. now
obj.metadata.annotations["infra.argocd.io/reconcile"] = now
return obj
