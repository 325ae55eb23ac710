# The one slurm.conf template of the test clusters: the local cluster
# (tests/slurm/up.sh), the docker cluster (tests/slurm-docker/lib.sh) and
# the VM guest (tests/vm/slurm_conf.sh) source this file and call
# slurm_conf, then append their nodes, their partition and their overrides
# (a later line wins).
# shellcheck shell=bash

# slurm_conf prints slurm.conf up to PrologFlags from these variables
# (those marked ? may be empty: their line is left out):
#   conf_header        the first comment line (who wrote the file)
#   conf_cluster       ClusterName
#   conf_ctld_host     SlurmctldHost
#   conf_ctld_port?    SlurmctldPort
#   conf_auth_note?    comment lines printed before AuthInfo
#   conf_auth_info?    AuthInfo's value (e.g. cred_expire=30, socket=...)
#   conf_state         StateSaveLocation
#   conf_spool         SlurmdSpoolDir
#   conf_ctld_pid      SlurmctldPidFile
#   conf_slurmd_pid    SlurmdPidFile
#   conf_ctld_log      SlurmctldLogFile
#   conf_slurmd_log    SlurmdLogFile
#   conf_plugstack     PlugStackConfig
#   conf_switch?       SwitchType
#   conf_slurmd_params? SlurmdParameters
#   conf_slurmd_timeout SlurmdTimeout (s)
#   conf_min_job_age   MinJobAge (s)
#   conf_tmpfs?        TmpFS
#   conf_prolog_flags? PrologFlags
# Slurm runs as root, with munge, no accounting, proctrack/linuxproc and
# task/none (a caller overrides them after this), cons_tres over CPUs,
# debug logs with millisecond times.
slurm_conf() {
	echo "$conf_header"
	echo "ClusterName=$conf_cluster"
	echo "SlurmctldHost=$conf_ctld_host"
	[ -z "${conf_ctld_port:-}" ] || echo "SlurmctldPort=$conf_ctld_port"
	cat <<CONF
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
CONF
	[ -z "${conf_auth_note:-}" ] || echo "$conf_auth_note"
	[ -z "${conf_auth_info:-}" ] || echo "AuthInfo=$conf_auth_info"
	cat <<CONF
StateSaveLocation=$conf_state
SlurmdSpoolDir=$conf_spool
SlurmctldPidFile=$conf_ctld_pid
SlurmdPidFile=$conf_slurmd_pid
SlurmctldLogFile=$conf_ctld_log
SlurmdLogFile=$conf_slurmd_log
SlurmctldDebug=debug
SlurmdDebug=debug
LogTimeFormat=iso8601_ms
PlugStackConfig=$conf_plugstack
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
CONF
	[ -z "${conf_switch:-}" ] || echo "SwitchType=$conf_switch"
	cat <<CONF
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
CONF
	[ -z "${conf_slurmd_params:-}" ] || echo "SlurmdParameters=$conf_slurmd_params"
	cat <<CONF
ReturnToService=2
SlurmdTimeout=$conf_slurmd_timeout
SlurmctldTimeout=30
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=$conf_min_job_age
CONF
	[ -z "${conf_tmpfs:-}" ] || echo "TmpFS=$conf_tmpfs"
	echo "MailProg=/bin/true"
	[ -z "${conf_prolog_flags:-}" ] || echo "PrologFlags=$conf_prolog_flags"
}
