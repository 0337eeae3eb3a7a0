-- Approves the pending plan: `infra.argocd.io/approve: <plan id>@<now>` and a reconcile
-- request. The controller applies it only if the plan it makes again is the same one.
local os = require("os")
local status = obj.status or {}
local plan = status.plan or {}
if plan.pending == nil or plan.pending == "" then
  error("no plan is waiting for approval", 0)
end
local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["infra.argocd.io/approve"] = plan.pending .. "@" .. now
obj.metadata.annotations["infra.argocd.io/reconcile"] = now
return obj
