/*
 * clock.h: the C front's two clocks: wall-clock milliseconds since the
 * epoch, as the samples and the supervisor's spans are stamped (prolog.c,
 * hold.c, phase.c), and monotonic milliseconds for its bounds (hold.c,
 * controlsock.c).
 */
#ifndef GYM_OTEL_CLOCK_H
#define GYM_OTEL_CLOCK_H

#include <time.h>

static inline long long gos_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Monotonic milliseconds (CLOCK_MONOTONIC), for deadlines only. */
static inline long long gos_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

#endif
