-- No runs until resumed: the infra.argocd.io/suspend annotation, with the reason given as the
-- action's `reason` parameter. An annotation, not spec.suspend, so that a self-healing
-- Application does not undo it.
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
local reason = actionParams["reason"]
if reason == nil or reason == "" then
  reason = "suspended through Argo CD at " .. os.date("!%Y-%m-%dT%H:%M:%SZ")
end
obj.metadata.annotations["infra.argocd.io/suspend"] = reason
return obj
