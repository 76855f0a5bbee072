module github.com/leaderrun/leaderrun

go 1.26
