/* launch.c - `stoke train --nproc N`: the shortcut that runs the same command under
 * OpenMPI's mpirun on this machine, N ranks, so one machine's data parallel run needs
 * no launcher line of its own. mpirun starts the ranks, forwards signals and names a
 * rank that dies; stoke's ranks find their world from what it sets (dist.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "stoke/dist.h"
#include "stoke/hw.h"

int cli_launch_nproc(long nproc, int argc, char **argv)
{
    int size;
    if (stoke_dist_launched(&size))
        return cli_usage_error("train",
                               "--nproc starts mpirun itself: give either `stoke train --nproc "
                               "N` or `mpirun -np N stoke train`, not both");
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return cli_error("train", "--nproc: cannot find this stoke binary (/proc/self/exe): %s",
                         strerror(errno));
    self[n] = '\0';
    stoke_cpu_info cpu;
    int cpus = stoke_cpu_probe(NULL, &cpu) == STOKE_OK ? stoke_cpu_available(&cpu) : 1;
    char np[24];
    snprintf(np, sizeof np, "%ld", nproc);
    char **av = calloc((size_t)argc + 16, sizeof *av);
    if (!av)
        return cli_error("train", "out of memory");
    int k = 0;
    av[k++] = "mpirun";
    av[k++] = "-np";
    av[k++] = np;
    /* the ranks split this machine's CPUs between them (train's data parallel line
     * says how many each has), so mpirun binds none of them to one core */
    av[k++] = "--bind-to";
    av[k++] = "none";
    if (nproc > cpus) /* more ranks than CPUs: slow, but the user asked */
        av[k++] = "--oversubscribe";
    /* OpenMPI refuses root unless told; a container's root is the usual case, and
     * `stoke train` itself runs as root there */
    if (geteuid() == 0)
        av[k++] = "--allow-run-as-root";
    av[k++] = self;
    av[k++] = "train";
    for (int i = 1; i < argc; i++) {
        /* --nproc N and --nproc=N stay with this launcher */
        if (!strcmp(argv[i], "--nproc")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--nproc=", 8))
            continue;
        /* OpenMPI 4's mpirun takes `--tune FILE` as its own wherever it stands */
        if (!strcmp(argv[i], "--tune") && i + 1 < argc) {
            size_t len = strlen(argv[i + 1]) + 8;
            char *joined = malloc(len);
            if (!joined)
                return cli_error("train", "out of memory");
            snprintf(joined, len, "--tune=%s", argv[++i]);
            av[k++] = joined; /* exec replaces the process: never freed */
            continue;
        }
        av[k++] = argv[i];
    }
    av[k] = NULL;
    fflush(stdout);
    execvp("mpirun", av);
    int e = errno;
    free(av);
    if (e == ENOENT)
        return cli_error("train",
                         "--nproc %ld runs the ranks with OpenMPI's mpirun, which is not on "
                         "PATH (scripts/deps installs openmpi-bin)",
                         nproc);
    return cli_error("train", "--nproc: cannot run mpirun: %s", strerror(e));
}
