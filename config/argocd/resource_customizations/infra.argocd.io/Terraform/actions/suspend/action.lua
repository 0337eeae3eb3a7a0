-- No runs until resumed.
obj.spec.suspend = true
return obj
