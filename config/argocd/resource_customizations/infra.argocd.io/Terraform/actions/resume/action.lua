-- Runs again: removes the infra.argocd.io/suspend annotation, and sets spec.suspend to false
-- when it is true (a spec.suspend kept in Git comes back with the next sync: resume there).
if obj.metadata.annotations ~= nil then
  obj.metadata.annotations["infra.argocd.io/suspend"] = nil
end
if obj.spec.suspend == true then
  obj.spec.suspend = false
end
return obj
