/* pmtrace's API for applications: named phases.
 *
 * A phase marks a stretch of a thread's work; pmtrace shows it in the
 * report (its time, MPI calls and load imbalance), on the critical path,
 * and in every export (OTF2 regions, Perfetto and Chrome slices, bands in
 * the HTML timeline). Phases nest. Without pmtrace (or before MPI_Init,
 * after MPI_Finalize) the calls do nothing; to build without pmtrace, link
 * a stub or define PMTRACE_NO_PHASES.
 *
 *   #include "pmtrace.h"
 *   PMTRACE_PHASE_BEGIN("solve");     (or pmtrace_phase_begin("solve"),
 *   ...                                when linked with libpmtrace)
 *   PMTRACE_PHASE_END();
 *
 * Fortran (gfortran, flang): call pmtrace_phase_begin('solve') and
 * call pmtrace_phase_end(); trailing blanks of the name are dropped.
 *
 * MPI_Pcontrol works too: MPI_Pcontrol(0) pauses recording (calls that move
 * no message are left out, and counted), MPI_Pcontrol(1) resumes it, and
 * MPI_Pcontrol(k) for k >= 2 begins the phase "Pcontrol k", which lasts
 * until the next MPI_Pcontrol with a level other than 0.
 */
#ifndef PMTRACE_H
#define PMTRACE_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef PMTRACE_NO_PHASES
static inline void pmtrace_phase_begin(const char *name) { (void)name; }
static inline void pmtrace_phase_end(void) {}
#define PMTRACE_PHASE_BEGIN(name) ((void)(name))
#define PMTRACE_PHASE_END() ((void)0)
#else
/* A phase named `name` (at most 255 bytes kept) begins on this thread. */
void pmtrace_phase_begin(const char *name);
/* The innermost phase of this thread ends. */
void pmtrace_phase_end(void);

/* The same through weak references: a program built with these links and
 * runs without pmtrace (the calls do nothing) and records its phases when
 * pmtrace is preloaded or linked. */
#if defined(__GNUC__) || defined(__clang__)
#pragma weak pmtrace_phase_begin
#pragma weak pmtrace_phase_end
#define PMTRACE_PHASE_BEGIN(name) \
    do { if (pmtrace_phase_begin) pmtrace_phase_begin(name); } while (0)
#define PMTRACE_PHASE_END() \
    do { if (pmtrace_phase_end) pmtrace_phase_end(); } while (0)
#else
#define PMTRACE_PHASE_BEGIN(name) pmtrace_phase_begin(name)
#define PMTRACE_PHASE_END() pmtrace_phase_end()
#endif
#endif

#ifdef __cplusplus
}
#endif

#endif
