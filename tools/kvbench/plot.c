// SPDX-License-Identifier: GPL-2.0
/*
 * plot.c: kvbench --plot.  The points are kept in memory while the
 * benchmark runs; at the end a gnuplot script with the points inline (data
 * blocks, gnuplot >= 5) is piped into gnuplot, found on $PATH and run
 * without a shell.  The terminal follows the file name: svg, or pngcairo.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"
#include "plot.h"

#define MAX_SERIES 8
#define MAX_POINTS 64
#define INSTALL_HINT "apt-get install -y gnuplot-nox"

static struct {
	char name[64];
	unsigned int n;
	double x[MAX_POINTS], y[MAX_POINTS];
} series[MAX_SERIES];
static unsigned int nr_series;

static int find_gnuplot(char *path, size_t len)
{
	const char *p = getenv("PATH");

	if (!p || !*p)
		p = "/usr/local/bin:/usr/bin:/bin";
	for (;;) {
		size_t n = strcspn(p, ":");
		/* an empty entry is the current directory */
		const char *dir = n ? p : ".";
		int w = snprintf(path, len, "%.*s/gnuplot", (int)(n ? n : 1), dir);

		if (w > 0 && (size_t)w < len && !access(path, X_OK))
			return 0;
		p += n;
		if (!*p)
			return -ENOENT;
		p++;	/* the ':' */
	}
}

int kvb_plot_check(const struct kvb_opts *o)
{
	char path[4096];

	if (!o->plot || !find_gnuplot(path, sizeof(path)))
		return 0;
	fprintf(stderr,
		"kvbench %s: --plot needs gnuplot, which is not on $PATH. As root, run:\n"
		"  apt-get update && " INSTALL_HINT "\n"
		"(Debian's gnuplot package works too; gnuplot-nox has no X11 or Qt dependencies.)\n",
		o->bench);
	return -ENOENT;
}

void kvb_plot_point(const char *name, double x, double y)
{
	unsigned int s;

	for (s = 0; s < nr_series; s++)
		if (!strcmp(series[s].name, name))
			break;
	if (s == nr_series) {
		if (nr_series == MAX_SERIES)
			return;
		snprintf(series[s].name, sizeof(series[s].name), "%s", name);
		nr_series++;
	}
	if (series[s].n < MAX_POINTS) {
		series[s].x[series[s].n] = x;
		series[s].y[series[s].n] = y;
		series[s].n++;
	}
}

static void write_script(FILE *f, const struct kvb_opts *o, const struct kvb_plot_axes *a)
{
	size_t n = strlen(o->plot);
	bool png = n > 4 && !strcmp(o->plot + n - 4, ".png");
	unsigned int s, i;
	const char *sep = "plot";

	if (png)
		fprintf(f, "set terminal pngcairo size 960,600 noenhanced font 'sans,11'\n");
	else
		fprintf(f, "set terminal svg size 960,600 dynamic noenhanced font 'sans,11' "
			   "background '#ffffff'\n");
	/* plot_name_ok() (report.c) let no quote or newline through */
	fprintf(f, "set output '%s'\n", o->plot);
	fprintf(f, "set title \"%s\"\nset xlabel \"%s\"\nset ylabel \"%s\"\n", a->title,
		a->xlabel, a->ylabel);
	if (a->logx)
		fprintf(f, "set logscale x 2\nset format x '%%g'\n");
	fprintf(f, "set yrange [0:*]\nset offsets graph 0.04, graph 0.04, graph 0.08, 0\n"
		   "set grid\nset key bottom right box opaque\n");
	for (s = 0; s < nr_series; s++) {
		fprintf(f, "$s%u << EOD\n", s);
		for (i = 0; i < series[s].n; i++)
			fprintf(f, "%.6g %.6g\n", series[s].x[i], series[s].y[i]);
		fprintf(f, "EOD\n");
	}
	for (s = 0; s < nr_series; s++) {
		fprintf(f, "%s $s%u using 1:2 with linespoints lw 2 pt 7 ps 1.2 title \"%s\"",
			sep, s, series[s].name);
		sep = ", \\\n    ";
	}
	fprintf(f, "\n");
}

int kvb_plot_write(const struct kvb_opts *o, const struct kvb_plot_axes *axes)
{
	char path[4096];
	struct stat st;
	int fd, status, ret;
	void (*old)(int);
	pid_t pid;
	FILE *f;

	if (!o->plot)
		return 0;
	if (!nr_series) {
		fprintf(stderr, "kvbench %s: --plot: no points to draw\n", o->bench);
		return -ENODATA;
	}
	if (find_gnuplot(path, sizeof(path))) {
		kvb_plot_check(o);
		return -ENOENT;
	}
	{
		char *argv[] = { "gnuplot", NULL };

		/* gnuplot's messages go to kvbench's stderr, its stdout too */
		pid = kvb_child_start(path, argv, KVB_CHILD_FEED, &fd);
		if (pid < 0)
			return (int)pid;
	}
	old = signal(SIGPIPE, SIG_IGN);
	f = fdopen(fd, "w");
	if (f) {
		write_script(f, o, axes);
		fclose(f);
	} else {
		close(fd);
	}
	signal(SIGPIPE, old);
	ret = kvb_child_wait(pid, &status);
	if (ret)
		return ret;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		fprintf(stderr, "kvbench %s: gnuplot (%s) failed; %s not written\n", o->bench,
			path, o->plot);
		return -EIO;
	}
	if (stat(o->plot, &st) || !st.st_size) {
		fprintf(stderr, "kvbench %s: gnuplot wrote nothing to %s\n", o->bench, o->plot);
		return -EIO;
	}
	kvb_note(o, "plot: %s (%lld bytes)", o->plot, (long long)st.st_size);
	return 0;
}
