module github.com/deskfarm/deskfarm

go 1.26.8

require (
	github.com/digitalocean/go-libvirt v0.0.0-20261013170128-efbbdf578ac8 // indirect
	golang.org/x/crypto v0.48.0 // indirect
	golang.org/x/image v0.48.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
)
