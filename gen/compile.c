/* gen/compile.c -- kernel source -> cubin, with nvcc (a child process) or NVRTC. */
#include "compile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#include "read_file.h"
#include "shared.h"

static int fail(moegen_error *err, int code, const char *fmt, const char *a, const char *b) {
  err->code = code;
  snprintf(err->msg, sizeof err->msg, fmt, a, b);
  return code;
}


/* 1 if ptxas reports a spill (a nonzero "N bytes spill stores") in log. */
static int has_spills(const char *log) {
  if (!log) return 0;
  for (const char *p = log; (p = strstr(p, "bytes spill stores")) != NULL; p++) {
    const char *q = p;
    while (q > log && q[-1] != ',' && q[-1] != '\n') q--;
    if (strtol(q, NULL, 10) != 0) return 1;
  }
  return 0;
}

/* Runs argv, collecting stdout+stderr into *log (malloc'd). Returns exit status or -1. */
static int run_capture(char *const argv[], char **log) {
  char path[] = "/tmp/moegen-nvcc-log-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return -1;
  unlink(path);
  pid_t pid = fork();
  if (pid < 0) {
    close(fd);
    return -1;
  }
  if (pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    execvp(argv[0], argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  off_t n = lseek(fd, 0, SEEK_END);
  *log = calloc((size_t)n + 1, 1);
  if (*log && n > 0 && pread(fd, *log, (size_t)n, 0) < 0) (*log)[0] = 0;
  close(fd);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int compile_nvcc(const char *source, moegen_unit u, const moegen_gen_options *opt,
                        const char *work_dir, int *spilled, unsigned char **cubin, size_t *size,
                        moegen_error *err) {
  char cu[4096], bin[4096], gencode[128], arch[32];
  snprintf(cu, sizeof cu, "%s/.%s.%d.u%d.cu", work_dir, opt->name, (int)getpid(), (int)u);
  snprintf(bin, sizeof bin, "%s/.%s.%d.u%d.cubin", work_dir, opt->name, (int)getpid(), (int)u);
  const char *a = strncmp(opt->arch, "sm_", 3) == 0 ? opt->arch + 3 : opt->arch;
  snprintf(arch, sizeof arch, "%s", a);
  snprintf(gencode, sizeof gencode, "-gencode=arch=compute_%s,code=sm_%s", arch, arch);
  FILE *f = fopen(cu, "w");
  if (!f || fputs(source, f) < 0 || fclose(f) != 0)
    return fail(err, EX_CANTCREAT, "%s: cannot write: %s", cu, strerror(errno));
  const char *nvcc = opt->nvcc ? opt->nvcc : "nvcc";
  char *argv[] = {(char *)nvcc, "-cubin", gencode, "-std=c++17", "-Xptxas", "-v",
                  "-o", bin, cu, NULL};
  char *log = NULL;
  int st = run_capture(argv, &log);
  int rc = 0;
  if (st != 0) {
    rc = fail(err, st == 127 ? EX_UNAVAILABLE : EX_SOFTWARE, "nvcc failed on %s:\n%s", cu,
              log ? log : "");
  } else if ((*cubin = (unsigned char *)moegen_read_file(bin, size)) == NULL) {
    rc = fail(err, EX_IOERR, "%s: cannot read nvcc output: %s", bin, strerror(errno));
  } else {
    *spilled = has_spills(log);
  }
  if (rc == 0) unlink(cu); /* keep the source of a failed compile for the user */
  unlink(bin);
  free(log);
  return rc;
}

static int compile_nvrtc(const char *source, moegen_unit u, const moegen_gen_options *opt,
                         int *spilled, unsigned char **cubin, size_t *size, moegen_error *err) {
  char name[128], what[192];
  snprintf(name, sizeof name, "%s.cu", opt->name);
  snprintf(what, sizeof what, "%s (%s unit)", name, moegen_unit_name(u));
  char *log = NULL;
  moegen_status st = moegen_nvrtc_compile(source, strlen(source), name, opt->arch, 1, cubin, size, &log);
  int rc = 0;
  if (st == MOEGEN_ERR_NO_NVRTC)
    rc = fail(err, EX_UNAVAILABLE, "NVRTC is not available: %s%s", log ? log : "", "");
  else if (st == MOEGEN_ERR_OUT_OF_MEMORY)
    rc = fail(err, EX_OSERR, "NVRTC ran out of memory on %s: %s", what, log ? log : "");
  else if (st != MOEGEN_OK)
    rc = fail(err, EX_SOFTWARE, "NVRTC failed on %s:\n%s", what, log ? log : "");
  else
    *spilled = has_spills(log);
  free(log);
  return rc;
}

int moegen_compile(const char *source, moegen_unit u, const moegen_gen_options *opt,
                   const char *work_dir, int *spilled, unsigned char **cubin, size_t *cubin_size,
                   moegen_error *err) {
  *cubin = NULL;
  *cubin_size = 0;
  *spilled = 0;
  size_t size;
  char *text = moegen_unit_source(source, strlen(source), u, &size);
  if (!text) return fail(err, EX_OSERR, "out of memory%s%s", "", "");
  int rc = opt->compile == MOEGEN_COMPILE_NVCC
               ? compile_nvcc(text, u, opt, work_dir, spilled, cubin, cubin_size, err)
               : compile_nvrtc(text, u, opt, spilled, cubin, cubin_size, err);
  free(text);
  return rc;
}
