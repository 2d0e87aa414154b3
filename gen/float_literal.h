/* gen/float_literal.h -- internal: config numbers as the floats the kernels
 * compute with, and their exact C spelling. */
#ifndef MOEGEN_GEN_FLOAT_LITERAL_H
#define MOEGEN_GEN_FLOAT_LITERAL_H

#include <stdbool.h>
#include <stddef.h>

/* Rounds d to the nearest float (ties to even, as C's conversion and the
 * CUDA compilers' literal parsing do) into *f. Returns false, leaving *f
 * alone, when that float is not finite and normal: d is NaN, rounds to an
 * infinity, to zero or to a subnormal. */
bool moegen_float_of(double d, float *f);

/* Writes f as a C99 hexadecimal floating literal with an f suffix
 * ("0x1.4p+1f"), which C, C++17 and CUDA compilers read back to exactly f,
 * into buf (MOEGEN_FLOAT_LITERAL_SIZE bytes are always enough). */
#define MOEGEN_FLOAT_LITERAL_SIZE 32
void moegen_float_literal(float f, char *buf, size_t size);

#endif
