-- Asks for a fresh plan even when nothing changed.
local os = require("os")
local now = os.date("!%Y-%m-%dT%H:%M:%SZ")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["infra.argocd.io/replan"] = now
obj.metadata.annotations["infra.argocd.io/reconcile"] = now
return obj
