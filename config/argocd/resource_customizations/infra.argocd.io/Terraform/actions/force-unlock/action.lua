-- Releases the state lock the status records, on a run started now.
local os = require("os")
local status = obj.status or {}
local lock = status.lock or {}
if lock.pending == nil or lock.pending == "" then
  error("the status records no held state lock", 0)
end
if obj.metadata.annotations == nil then
  obj.metadata.annotations = {}
end
obj.metadata.annotations["infra.argocd.io/force-unlock"] = lock.pending
obj.metadata.annotations["infra.argocd.io/reconcile"] = os.date("!%Y-%m-%dT%H:%M:%SZ")
return obj
