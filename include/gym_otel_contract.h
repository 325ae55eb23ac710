/*
 * gym_otel_contract.h: the constants the C front shares with the Go side.
 * Generated from the Go constants by internal/contract (go generate); do
 * not edit.
 */
#ifndef GYM_OTEL_CONTRACT_H
#define GYM_OTEL_CONTRACT_H

/* plugin.DefaultRecordDir */
#define GOS_DEFAULT_RECORD_DIR "/run/gym-otel"
/* record.File */
#define GOS_RECORD_FILE "record"
/* lifecycle.HoldSocketPrefix */
#define GOS_HOLD_SOCKET_PREFIX "gym-otel-hold-"
/* timing.MaxFinalWait, seconds */
#define GOS_MAX_FINAL_WAIT 30
/* plugin.EnvInJob */
#define GOS_ENV_IN_JOB "GYM_OTEL_JOB"
/* plugin.JobControlSpec */
#define GOS_JOB_CONTROL_SPEC "GYM_OTEL_SPEC"
/* taskenv.JobControlToken */
#define GOS_JOB_CONTROL_TOKEN "GYM_OTEL_TOKEN"

#endif
