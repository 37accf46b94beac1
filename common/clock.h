/* The one monotonic clock of rdcp: durations, deadlines, rates. Never the
 * wall clock, which steps. */
#ifndef RDCP_COMMON_CLOCK_H
#define RDCP_COMMON_CLOCK_H

/* Seconds since an arbitrary start, monotonic (CLOCK_MONOTONIC). */
double    clock_s(void);
/* The same in whole milliseconds. */
long long clock_ms(void);

#endif
