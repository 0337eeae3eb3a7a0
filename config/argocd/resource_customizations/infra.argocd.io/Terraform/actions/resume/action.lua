-- Runs again.
obj.spec.suspend = false
return obj
