/* A shared object whose constructor writes MARKER: the proof that the
   process that loaded it ran its code (TestPulseJailed loads it into a
   sound server as a LADSPA plugin, which it is not). */
#include <stdio.h>

__attribute__((constructor)) static void mark(void) {
	FILE *f = fopen(MARKER, "w");
	if (f) {
		fputs("loaded\n", f);
		fclose(f);
	}
}

const void *ladspa_descriptor(unsigned long i) {
	(void)i;
	return 0;
}
