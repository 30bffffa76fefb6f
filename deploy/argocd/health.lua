-- Argo CD health of a PDDeployment (pdscaler.io/v1alpha1), from the status pdscaler
-- writes. Argo CD runs it with `obj` set to the resource; Lua 5.1 (gopher-lua).
-- Install: deploy/argocd/README.md. Tested: tests/unit/test_argocd_health.py (statuses the
-- operator's own status code builds) and tests/lab/test_operator_rollout.py (the live
-- object through a v1 -> v2 rollout).
--
--   Progressing  no status yet, a generation pdscaler has not observed, a rollout in
--                progress, or pools still coming up to their minimum
--   Degraded     a stored spec pdscaler refuses (Stalled True, InvalidSpec: nothing of it
--                is acted on), a rollout rolling back or rolled back (Progressing reason
--                RollingBack or ProgressDeadlineExceeded, Stalled RolledBack: the version
--                asked for does not serve),
--                writes the API server refuses (WritesFailing True), or a pool below its
--                minimum while the cluster lacks GPUs for it (CapacityLimited True)
--   Suspended    the pdscaler.io/paused annotation (Paused True): nothing is written
--   Healthy      both pools at their minimum of Ready pods (Ready True); the message
--                names a hold on missing metrics (MetricsAvailable False) or Recommend
--                mode, which change nothing about serving
local function health(status, message)
  return {status = status, message = message}
end

local function find(conditions, wanted)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == wanted then
      return c
    end
  end
  return nil
end

local function said(c)
  if c == nil then
    return ""
  end
  local text = c.reason or ""
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

local status = obj.status
local generation = obj.metadata and obj.metadata.generation
if status == nil or status.observedGeneration == nil then
  return health("Progressing", "waiting for pdscaler to observe the PDDeployment")
end
if generation ~= nil and status.observedGeneration < generation then
  return health("Progressing", "waiting for pdscaler to observe generation " .. tostring(generation))
end

local conditions = status.conditions
local ready = find(conditions, "Ready")
local progressing = find(conditions, "Progressing")
local writes = find(conditions, "WritesFailing")
local capacity = find(conditions, "CapacityLimited")
local metrics = find(conditions, "MetricsAvailable")
local stalled = find(conditions, "Stalled")
local paused = find(conditions, "Paused")

if writes ~= nil and writes.status == "True" then
  return health("Degraded", said(writes))
end
if progressing ~= nil and (progressing.reason == "ProgressDeadlineExceeded" or progressing.reason == "RollingBack") then
  return health("Degraded", said(progressing))
end
if stalled ~= nil and stalled.status == "True" then
  return health("Degraded", said(stalled))
end
if paused ~= nil and paused.status == "True" then
  return health("Suspended", said(paused))
end
if progressing ~= nil and progressing.status == "True" then
  return health("Progressing", said(progressing))
end
if ready == nil or ready.status ~= "True" then
  if capacity ~= nil and capacity.status == "True" then
    return health("Degraded", said(ready) .. "; " .. said(capacity))
  end
  return health("Progressing", said(ready))
end

local message = said(ready)
if metrics ~= nil and metrics.status == "False" then
  message = message .. "; scaling holds: " .. said(metrics)
end
if obj.spec ~= nil and obj.spec.scaling ~= nil and obj.spec.scaling.mode == "Recommend" then
  message = message .. "; Recommend mode: pools are not resized"
end
return health("Healthy", message)
