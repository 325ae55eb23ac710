/*
 * gym_otel_contract.h: the constants the C front shares with the Go side.
 * Generated from the Go constants of helper/contract (go generate); do
 * not edit.
 */
#ifndef GYM_OTEL_CONTRACT_H
#define GYM_OTEL_CONTRACT_H

/* DefaultRecordDir */
#define GOS_DEFAULT_RECORD_DIR "/run/gym-otel"
/* RecordFile */
#define GOS_RECORD_FILE "record"
/* ControlPathMax */
#define GOS_HOLD_PATH_MAX 107
/* MaxFinalWait, seconds */
#define GOS_MAX_FINAL_WAIT 30
/* EnvInJob */
#define GOS_ENV_IN_JOB "GYM_OTEL_JOB"
/* JobControlSpec */
#define GOS_JOB_CONTROL_SPEC "GYM_OTEL_SPEC"
/* JobControlToken */
#define GOS_JOB_CONTROL_TOKEN "GYM_OTEL_TOKEN"
/* RecordStatus */
#define GOS_RECORD_STATUS "status"
/* RecordOnFailure */
#define GOS_RECORD_ON_FAILURE "on_failure"
/* RecordReason */
#define GOS_RECORD_REASON "reason"
/* RecordFinalWait */
#define GOS_RECORD_FINAL_WAIT "final_wait"
/* RecordSupervisorPID */
#define GOS_RECORD_SUPERVISOR_PID "supervisor_pid"
/* RecordSupervisorStart */
#define GOS_RECORD_SUPERVISOR_START "supervisor_start"
/* RecordCgroupMemory */
#define GOS_RECORD_CGROUP_MEMORY "cgroup_memory"
/* RecordCgroupCpuset */
#define GOS_RECORD_CGROUP_CPUSET "cgroup_cpuset"
/* RecordControlSocket */
#define GOS_RECORD_HOLD_SOCKET "hold_socket"
/* RecordOutputDir */
#define GOS_RECORD_OUTPUT_DIR "output_dir"
/* RecordBackend */
#define GOS_RECORD_BACKEND "backend"
/* RecordEnv */
#define GOS_RECORD_ENV "env"
/* RecordUnset */
#define GOS_RECORD_UNSET "unset"
/* RecordResAttr */
#define GOS_RECORD_RESATTR "resattr"
/* ControlQuestion */
#define GOS_HOLD_QUESTION "sampled"
/* ControlTargets */
#define GOS_HOLD_TARGETS "targets"
/* ControlSampledMs */
#define GOS_HOLD_SAMPLED_MS "sampled_ms"
/* ControlFinal */
#define GOS_HOLD_FINAL "final"
/* ControlStepStart */
#define GOS_HOLD_STEP_START "step start"
/* ControlStepEnd */
#define GOS_HOLD_STEP_END "step end"
/* ControlEpilogStart */
#define GOS_HOLD_EPILOG_START "epilog start"
/* ControlOK */
#define GOS_HOLD_OK "ok"
/* ControlRequestMax */
#define GOS_HOLD_REQUEST_MAX 192
/* ControlAnswerMax */
#define GOS_HOLD_ANSWER_MAX 256
/* ControlExchangeMs */
#define GOS_HOLD_EXCHANGE_MS 250
/* TraceparentLen */
#define GOS_TRACEPARENT_LEN 55
/* EnvPrologStart */
#define GOS_ENV_PROLOG_START "GYM_OTEL_PROLOG_START_MS"
/* EnvEpilogStart */
#define GOS_ENV_EPILOG_START "GYM_OTEL_EPILOG_START_MS"
/* EnvSlurmdPID */
#define GOS_ENV_SLURMD_PID "GYM_OTEL_SLURMD_PID"
/* DefaultPrologTimeout */
#define GOS_DEFAULT_PROLOG_TIMEOUT 60
/* StartLockPrefix */
#define GOS_START_LOCK_PREFIX ".start-"
/* StartLockSuffix */
#define GOS_START_LOCK_SUFFIX ".lock"

#endif
