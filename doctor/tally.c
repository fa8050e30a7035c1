/* doctor/tally.c — the doctor's findings printed and counted (doctor/tally.h). */
#include "tally.h"
#include <stdarg.h>
#include <stdio.h>

static void say(DoctorTally *t, int problem, const char *fmt, va_list ap) {
    if (!t->lead) return;
    printf("  %s: ", problem ? "PROBLEM" : "warning");
    vprintf(fmt, ap);
    printf("\n");
    if (problem) t->problems++;
    else t->warnings++;
}
void doctor_problem(DoctorTally *t, const char *fmt, ...) { va_list ap; va_start(ap, fmt); say(t, 1, fmt, ap); va_end(ap); }
void doctor_warning(DoctorTally *t, const char *fmt, ...) { va_list ap; va_start(ap, fmt); say(t, 0, fmt, ap); va_end(ap); }
