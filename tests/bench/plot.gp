# tests/bench/plot.gp - the curves of tests/bench/run. Called as
#   gnuplot -e "data='DIR'; out='RESULTS'; conns='32'" plot.gp
# DIR holds one file per series, PHASE-TARGET-CASE.dat: x, req/s, p99 ms, target CPU us/req.
set terminal pngcairo size 1500,460 font ",10" noenhanced
set grid
set logscale x
set logscale y
set key top right
series = "nginx-plain proxy-plain proxy-unique proxy-replay"
title_of(s) = s eq "nginx-plain" ? "nginx reference, no key" : \
              s eq "proxy-plain" ? "proxy, no key" : \
              s eq "proxy-unique" ? "proxy, fresh key" : "proxy, replay"
f(ph, s) = sprintf("%s/%s-%s.dat", data, ph, s)

do for [ph in "body conns"] {
  set output sprintf("%s/%s.png", out, ph eq "body" ? "body-size" : "connections")
  if (ph eq "body") {
    set xlabel "request body size"
    set xtics ("100 B" 100, "1 KiB" 1024, "10 KiB" 10240, "100 KiB" 102400, "1 MiB" 1048576)
    set xrange [70:1500000]
    ttl = "cost against request body size (" . conns . " connections)"
  } else {
    set xlabel "connections"
    set xtics (1, 8, 32, 128, 512, 1000)
    set xrange [0.8:1300]
    ttl = "cost against connections (75-byte body)"
  }
  set multiplot layout 1,3 title ttl
  set key bottom left
  set ylabel "requests/s"
  plot for [s in series] f(ph, s) using 1:2 with linespoints lw 2 title title_of(s)
  set key top left
  set ylabel "p99 latency (ms)"
  plot for [s in series] f(ph, s) using 1:3 with linespoints lw 2 title title_of(s)
  set ylabel "CPU of the proxy (or nginx) per request (µs)"
  plot for [s in series] f(ph, s) using 1:4 with linespoints lw 2 title title_of(s)
  unset multiplot
}
