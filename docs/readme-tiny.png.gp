set terminal pngcairo size 1200,800 font ',10'
set output 'docs/readme-tiny.png'
set multiplot layout 2,2
set grid
set key top right
set title 'loss by step'
set xlabel 'step'
set ylabel 'nats per token'
plot 'docs/readme-tiny.png.dat' using (strcol(1) eq 'S' ? $2 : 1/0):4 with lines title 'train', '' using (strcol(1) eq 'E' ? $2 : 1/0):4 with linespoints title 'val'
set title 'loss by token'
set xlabel 'tokens'
plot 'docs/readme-tiny.png.dat' using (strcol(1) eq 'S' ? $3 : 1/0):4 with lines title 'train', '' using (strcol(1) eq 'E' ? $3 : 1/0):4 with linespoints title 'val'
set title 'throughput'
set xlabel 'step'
set ylabel 'tokens/s'
plot 'docs/readme-tiny.png.dat' using (strcol(1) eq 'S' ? $2 : 1/0):5 with lines notitle
set title 'where the step went (slowest rank)'
set ylabel 'ms'
set key outside right
plot 'docs/readme-tiny.png.dat' using (strcol(1) eq 'S' ? $2 : 1/0):6 with lines title 'compute', '' using (strcol(1) eq 'S' ? $2 : 1/0):7 with lines title 'comm exposed', '' using (strcol(1) eq 'S' ? $2 : 1/0):8 with lines title 'bubble', '' using (strcol(1) eq 'S' ? $2 : 1/0):9 with lines title 'optimizer', '' using (strcol(1) eq 'S' ? $2 : 1/0):10 with lines title 'data', '' using (strcol(1) eq 'S' ? $2 : 1/0):11 with lines title 'host'
unset multiplot
