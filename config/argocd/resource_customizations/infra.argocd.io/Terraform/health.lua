-- Argo CD health of a tfops Terraform object, from its Ready condition (docs/argocd.md,
-- "Argo CD health"). The same mapping as tfops_core::health::health; a test runs both on testdata/.
-- Argo CD runs this with gopher-lua and only the base, table, package and os libraries: no
-- string or math functions here.
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function text(value)
  if value == nil then
    return ""
  end
  return value
end

local status = obj.status or {}
local spec = obj.spec or {}
local ready = condition("Ready")
local message = ""
if ready ~= nil then
  message = text(ready.message)
end

-- Suspended by spec.suspend or by the infra.argocd.io/suspend annotation (its value is the
-- reason; the suspend action sets it, so that a self-healing Application keeps it).
local annotations = (obj.metadata or {}).annotations or {}
local suspendedBy = annotations["infra.argocd.io/suspend"]
local why = ""
if spec.suspend == true then
  why = "spec.suspend is true; "
elseif suspendedBy == "" then
  why = "infra.argocd.io/suspend is set; "
elseif suspendedBy ~= nil then
  why = "infra.argocd.io/suspend: " .. suspendedBy .. "; "
end
if why ~= "" or (ready ~= nil and ready.reason == "Suspended") then
  hs.status = "Suspended"
  hs.message = "reconciliation is suspended (" .. why .. "the resume action resumes it)"
  return hs
end

local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = text(stalled.message)
  return hs
end

if ready == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the first reconciliation"
  return hs
end

if obj.metadata.deletionTimestamp ~= nil and ready.status ~= "False" then
  hs.status = "Progressing"
  hs.message = "deleting: " .. message
  return hs
end

local observed = status.observedGeneration or 0
local generation = obj.metadata.generation or 0
if observed < generation and ready.status ~= "Unknown" then
  hs.status = "Progressing"
  hs.message = "a new generation is being reconciled"
  return hs
end

if ready.status == "True" then
  hs.status = "Healthy"
  hs.message = message
  return hs
end

if ready.status == "False" then
  local lock = status.lock or {}
  if ready.reason == "LockHeld" and text(lock.pending) ~= "" then
    local holder = text(lock.holder)
    if holder == "" then
      holder = "an unknown holder"
    end
    message = message .. " (lock " .. lock.pending .. " held by " .. holder ..
      "; the force-unlock action releases it)"
  end
  hs.status = "Degraded"
  hs.message = message
  return hs
end

-- Ready's message names the plan and the ways to approve it (the approve action among them).
local plan = status.plan or {}
if ready.reason == "TerraformPlannedWithChanges" and text(plan.pending) ~= "" then
  hs.status = "Suspended"
  hs.message = message
  return hs
end

-- Nothing to do until spec.applyWindows lets an apply start: paused, not working.
if ready.reason == "ApplyWindowClosed" then
  hs.status = "Suspended"
  hs.message = "waiting for an apply window: " .. message
  return hs
end

-- Working: planning, an approved plan being applied (TerraformApplying), waiting for a
-- runner Pod.
hs.status = "Progressing"
hs.message = message
return hs
