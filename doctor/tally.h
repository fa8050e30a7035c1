/* doctor/tally.h — the doctor's count of what it found, shared by its sections.
 *
 * The idea: each section (doctor_env.c, doctor_net.c, doctor_gpu.c,
 * doctor_sweep.c) reports a finding through doctor_problem or doctor_warning;
 * rank 0 prints it and the tally counts it, and doctor.c ends the report with
 * the counts (exit 1 on any problem). The tally lives here, not in doctor.c,
 * so the sections stand on it without calling back into the file that calls
 * them. */
#pragma once

typedef struct {
    int problems, warnings;
    int lead;                   /* this rank prints the report (rank 0); the others count in silence */
} DoctorTally;
/* Rank 0 prints "  PROBLEM: ..." or "  warning: ..." and counts it (printf-style). */
void doctor_problem(DoctorTally *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void doctor_warning(DoctorTally *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
