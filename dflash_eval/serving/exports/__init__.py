"""The files servers and their clients write (AIPerf's exports, llama.cpp's scrape, a file of responses), read
into the counters' values without a tensor (the serving wing's formats/)."""
