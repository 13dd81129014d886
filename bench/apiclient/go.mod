module gangkeeper/bench/apiclient

go 1.21
