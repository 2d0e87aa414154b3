/* gen/read_file.h -- internal: reading a whole file. */
#ifndef MOEGEN_GEN_READ_FILE_H
#define MOEGEN_GEN_READ_FILE_H

#include <stddef.h>

/* Reads a whole file into a new NUL-terminated buffer (*size excludes the
 * NUL), or returns NULL with errno set. */
char *moegen_read_file(const char *path, size_t *size);

#endif
