package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/gym-otel-spank/gym-otel-spank/helper/replay"
)

func init() {
	commands["replay"] = command{"send a job's jsonl files to the backend again (each node dir whose receipt does not say the backend has it all; --all: every node, every later link), with the token from the environment", runReplay}
}

func runReplay(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", "[--plugstack FILE] [--site FILE] [--site-item KEY=VALUE...] [--endpoint URL] [--token-env NAME] [--binary PATH] [--timeout D] [--progress D] [--all | --appended [--force]] [--while-delivering] DIR   (a job dir, or its otel/ dir; someone else's only with --endpoint and --token-env)", stderr)
	var sf siteFlags
	sf.register(fs)
	endpoint := fs.String("endpoint", "", "send to this OTLP/HTTP `URL` (default: the site's otel.endpoint, found as validate finds it; never the replayed dir's)")
	tokenEnv := fs.String("token-env", "", "the environment variable `NAME` holding the bearer token (default: the site's otel.token_env)")
	binary := fs.String("binary", "", "the collector `PATH` (default "+replay.DefaultBinary+", else otelcol-gym beside this program or on PATH)")
	timeout := durationVar(fs, "timeout", replay.DefaultTimeout, "give up after this `duration` (with a unit: 90s, 10m; the collector is stopped)")
	every := durationVar(fs, "progress", replay.DefaultProgress, "print progress every `duration` (with a unit: 5s)")
	appended := fs.Bool("appended", false, "send only the lines the supervisors appended after their collectors' exit (the drain's and the epilog's phase spans, listed in each node's receipt.json) that their supervisor did not deliver to the backend at the drain")
	force := fs.Bool("force", false, "with --appended: also send the lines the supervisors already delivered")
	all := fs.Bool("all", false, "send every node dir's files whole, also those whose receipt.json says the backend accepted everything their collector took (default: those are skipped; every other node dir is sent whole)")
	whileDelivering := fs.Bool("while-delivering", false, "send from a node dir's delivery checkpoint even while its supervisor is still delivering from it (the job runs: it holds delivery.lock); the same lines may then reach the backend twice (default: refuse, naming the node)")
	rest, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(rest) != 1 {
		return usageError{fmt.Sprintf("give one directory (got %d arguments)", len(rest))}
	}
	if *timeout <= 0 {
		return usageError{fmt.Sprintf("--timeout %v: must be positive", *timeout)}
	}
	if *every <= 0 {
		return usageError{fmt.Sprintf("--progress %v: must be positive", *every)}
	}
	if *force && !*appended {
		return usageError{"--force: only with --appended"}
	}
	if *all && *appended {
		return usageError{"--all and --appended: give one (--appended --force sends every appended line)"}
	}
	if *endpoint != "" {
		if err := replay.CheckEndpoint("--endpoint", *endpoint); err != nil {
			return usageError{err.Error()}
		}
	}
	// The site's settings, found as every command finds them, only when
	// a flag leaves the endpoint or the token's variable to the site.
	var site siteLayers
	checked := ""
	if *endpoint == "" || *tokenEnv == "" {
		var err error
		site, err = sf.lookup()
		checked = checkedLine(site, "", "-")
		if site.Unread {
			return err
		}
		if err != nil {
			return withChecked(err, checked)
		}
		fmt.Fprintf(stdout, "gym-otel: checked: %s\n", checked)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	res, err := replay.Run(ctx, replay.Options{
		Dir: rest[0], Endpoint: *endpoint, TokenEnv: *tokenEnv, Site: site.File, SiteItems: site.Items, Binary: collectorBinary(*binary),
		Timeout: *timeout, Progress: *every, Out: stdout, Appended: *appended, Force: *force, All: *all, WhileDelivering: *whileDelivering,
	})
	if res != nil {
		for _, l := range res.Summary() {
			fmt.Fprintln(stdout, l)
		}
	}
	if res != nil && res.Unanswered() {
		// The verdict and the cause are in the summary: a hung backend,
		// not a loss.
		return errUnanswered
	}
	if err != nil {
		if checked != "" && res == nil {
			return withChecked(err, checked)
		}
		return err
	}
	if !res.OK() {
		return errFailed
	}
	return nil
}

// collectorBinary is the collector replay runs: flag, else the default
// install path, else otelcol-gym beside this executable, else on PATH.
func collectorBinary(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if _, err := os.Stat(replay.DefaultBinary); err == nil {
		return replay.DefaultBinary
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "otelcol-gym")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "otelcol-gym"
}
