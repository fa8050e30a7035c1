set terminal pngcairo size 1200,800 font ',10'
set output 'docs/readme-tiny.png'
set multiplot layout 2,2
set grid
set key top right
set title 'loss by step'
set xlabel 'step'
set ylabel 'nats per token'
plot 'docs/readme-tiny.png.dat' using 1:3 with lines title 'train', 'docs/readme-tiny.png.eval.dat' using 1:3 with linespoints title 'val'
set title 'loss by token'
set xlabel 'tokens'
plot 'docs/readme-tiny.png.dat' using 2:3 with lines title 'train', 'docs/readme-tiny.png.eval.dat' using 2:3 with linespoints title 'val'
set title 'throughput'
set xlabel 'step'
set ylabel 'tokens/s'
plot 'docs/readme-tiny.png.dat' using 1:4 with lines notitle
set title 'where the step went (slowest rank)'
set ylabel 'ms'
set key outside right
plot 'docs/readme-tiny.png.split.dat' using 1:2 with lines title 'compute', '' using 1:3 with lines title 'comm exposed', '' using 1:4 with lines title 'bubble', '' using 1:5 with lines title 'optimizer', '' using 1:6 with lines title 'data', '' using 1:7 with lines title 'host'
unset multiplot
