/* The one clock coil measures with: monotonic, unaffected by changes to the
 * wall clock.  Timings, deadlines and ages all read it. */
#ifndef COIL_CLOCK_H
#define COIL_CLOCK_H

#include <stdint.h>

double clock_s(void);    /* seconds, with nanoseconds in the fraction */
double clock_ms(void);   /* milliseconds, with the fraction */
int64_t clock_ms64(void); /* whole milliseconds */

#endif
