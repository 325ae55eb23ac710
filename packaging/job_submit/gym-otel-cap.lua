-- job_submit.lua for slurmctld: refuse a job whose job-control (SPANK)
-- variables are too large for the job prolog.
--
-- slurmd passes every job-control variable to `slurmstepd spank prolog` as
-- an environment string (SPANK_<name>=<value>). Linux refuses to exec a
-- program whose single environment string exceeds 128 KiB (MAX_ARG_STRLEN),
-- and a prolog that cannot start drains the node. Once any SPANK plugin
-- defines a job prolog (gym_otel.so does), slurmd runs one for every job,
-- and any user can set job-control variables through libslurm, with or
-- without --gym-otel. gym_otel.so bounds what it forwards itself (32 KiB of
-- settings, 16 KiB of token); this filter bounds everything else.
--
-- Use: slurm.conf JobSubmitPlugins=lua, and this file (or its function
-- merged into yours) as job_submit.lua beside slurm.conf on the
-- controller. Needs Slurm's job_submit/lua plugin (Debian:
-- slurm-wlm-basic-plugins; RPM: slurm, built with lua).

local MAX_ONE = 64 * 1024   -- one variable, bytes (the kernel's bound is 128 KiB)
local MAX_ALL = 1024 * 1024 -- all of them, bytes (the whole environment must fit too)

local function check_spank_env(job_desc)
	local n = job_desc.spank_job_env_size or 0
	if n == 0 then
		return slurm.SUCCESS
	end
	local env = job_desc.spank_job_env
	local total = 0
	for i = 0, n - 1 do
		local e = env[i]
		if e ~= nil then
			total = total + #e
			if #e > MAX_ONE then
				local name = string.match(e, "^[^=]*") or "?"
				slurm.log_user("job-control variable %s is %d bytes, more than the %d allowed: the job prolog could not start",
					name, #e, MAX_ONE)
				return slurm.ERROR
			end
		end
	end
	if total > MAX_ALL then
		slurm.log_user("job-control variables total %d bytes, more than the %d allowed", total, MAX_ALL)
		return slurm.ERROR
	end
	return slurm.SUCCESS
end

function slurm_job_submit(job_desc, part_list, submit_uid)
	return check_spank_env(job_desc)
end

function slurm_job_modify(job_desc, job_ptr, part_list, modify_uid)
	return slurm.SUCCESS
end

return slurm.SUCCESS
