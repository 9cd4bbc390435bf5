import Testing
@testable import sandboxed_run

/// The fast path for `run` must read exactly what ArgumentParser reads, or
/// leave the words to ArgumentParser (which then gives its help or error).
@Suite struct RunFastPathTests {
    static let accepted: [[String]] = [
        ["--app", "com.example.memo"],
        ["--app=com.example.memo", "--policy", "networked", "--report", "--best-effort"],
        ["--policy=/tmp/p.plist", "--app", "a", "--grant", "VAULT=v.bookmark", "--grant=NOTES=n.bookmark"],
        ["--app", "a", "--keep-fd", "3", "--keep-fd=4", "--setenv", "A=b=c", "--keep-env", "TERM", "--on-stale", "follow",
         "--on-missing", "prompt", "--chdir", "/tmp", "--setenv=X="],
        ["--app", "a", "--explain", "--denials", "/tmp/log.jsonl"], ["--denials=/tmp/d", "--app", "a"],
        ["--app", "a", "--denials", "/tmp/d", "--denials-limit", "16M"], ["--denials-limit=4096", "--app", "a"],
    ]
    static let leftToArgumentParser: [[String]] = [
        [], ["--help"], ["-h"], ["--app"], ["--app", "--report"], ["--app", "a", "--on-stale", "sometimes"],
        ["--app", "a", "--keep-fd", "three"], ["--app", "a", "--unknown"], ["--app", "a", "stray"],
        ["--app", "a", "--app", "b"], ["--app", "a", "--report=yes"], ["--app", "a", "--setenv", "-x"], ["--app", "a", "--explain=1"],
        ["--app", "a", "--denials-limit", "1M", "--denials-limit", "2M"], ["--app", "a", "--denials-limit"],
    ]

    @Test(arguments: accepted) func readsWhatArgumentParserReads(options: [String]) throws {
        let command = ["/bin/echo", "--app", "-h", "--"]
        let fast = try #require(RunOptions.parse(options[...], command: command))
        var slow = try #require(try SandboxedRun.parseAsRoot(["run"] + options) as? Run)
        slow.command = command
        #expect(fast.app == slow.app.app)
        #expect(fast.policy == slow.policy)
        #expect(fast.bestEffort == slow.bestEffort)
        #expect(fast.report == slow.report)
        #expect(fast.keptDescriptors == slow.keptDescriptors)
        #expect(fast.setEnvironment == slow.setEnvironment)
        #expect(fast.keptEnvironment == slow.keptEnvironment)
        #expect(fast.grants == slow.grants)
        #expect(fast.onStale == slow.onStale)
        #expect(fast.onMissing == slow.onMissing)
        #expect(fast.workingDirectory == slow.workingDirectory)
        #expect(fast.explain == slow.explain)
        #expect(fast.denialsFile == slow.denialsFile)
        #expect(fast.denialsLimit == slow.denialsLimit)
        #expect(fast.command == command)
    }

    @Test(arguments: leftToArgumentParser) func leavesEverythingElseToArgumentParser(options: [String]) {
        #expect(RunOptions.parse(options[...], command: ["/bin/true"]) == nil)
    }

    @Test func noCommandIsLeftToArgumentParser() {
        #expect(RunOptions.parse(["--app", "a"], command: []) == nil)
    }
}
