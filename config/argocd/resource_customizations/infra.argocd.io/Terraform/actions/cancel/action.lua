-- Stops the run under way: a plan or drift check ends, an apply is interrupted as Ctrl-C does
-- (Terraform writes the state and releases its lock). The run ends with reason RunCancelled,
-- saying it was stopped from Argo CD; Argo CD's own audit records which user ran the action.
local os = require("os")
local running = false
for _, c in ipairs((obj.status or {}).conditions or {}) do
  if c.type == "Reconciling" and c.status == "True" then
    running = true
  end
end
if not running then
  error("no run is under way", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["infra.argocd.io/cancel"] = "argocd@" .. os.date("!%Y-%m-%dT%H:%M:%SZ")
return obj
