/*
 * gym_otel_contract.h: the constants the C front shares with the Go side.
 * Generated from the Go constants of internal/contract (go generate); do
 * not edit.
 */
#ifndef GYM_OTEL_CONTRACT_H
#define GYM_OTEL_CONTRACT_H

/* DefaultRecordDir */
#define GOS_DEFAULT_RECORD_DIR "/run/gym-otel"
/* RecordFile */
#define GOS_RECORD_FILE "record"
/* HoldSocketPrefix */
#define GOS_HOLD_SOCKET_PREFIX "gym-otel-hold-"
/* MaxFinalWait, seconds */
#define GOS_MAX_FINAL_WAIT 30
/* EnvInJob */
#define GOS_ENV_IN_JOB "GYM_OTEL_JOB"
/* JobControlSpec */
#define GOS_JOB_CONTROL_SPEC "GYM_OTEL_SPEC"
/* JobControlToken */
#define GOS_JOB_CONTROL_TOKEN "GYM_OTEL_TOKEN"
/* EnvPrologStart */
#define GOS_ENV_PROLOG_START "GYM_OTEL_PROLOG_START_MS"

#endif
