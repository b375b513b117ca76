/* SPDX-License-Identifier: GPL-2.0 */
/*
 * plot.h: kvbench --plot FILE.svg|FILE.png: the points of a sweep, drawn
 * with gnuplot (Debian: gnuplot-nox, or gnuplot) once the run is over.
 */
#ifndef KVBENCH_PLOT_H
#define KVBENCH_PLOT_H

#include "report.h"

struct kvb_plot_axes {
	const char *title;
	const char *xlabel;
	const char *ylabel;
	bool logx;		/* log2 x axis */
};

/*
 * Before the run: 0 when o->plot is unset or gnuplot is on $PATH; else
 * prints what to install and returns -ENOENT, so a long run is not wasted.
 */
int kvb_plot_check(const struct kvb_opts *o);

/* Record a point of series (up to 8 series of 64 points, in call order). */
void kvb_plot_point(const char *series, double x, double y);

/* After the run: draw every recorded point into o->plot.  0 or -errno. */
int kvb_plot_write(const struct kvb_opts *o, const struct kvb_plot_axes *axes);

#endif /* KVBENCH_PLOT_H */
