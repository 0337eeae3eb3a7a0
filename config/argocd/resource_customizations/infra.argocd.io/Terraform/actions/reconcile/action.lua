-- Asks for a run now.
local os = require("os")
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["infra.argocd.io/reconcile"] = os.date("!%Y-%m-%dT%H:%M:%SZ")
return obj
