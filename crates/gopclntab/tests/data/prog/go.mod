module whyslowgopclntabtest

go 1.18
