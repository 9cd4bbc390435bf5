import Foundation
import Testing

/// What `follow` may write, and how the bookmark reaches the disk.
@Suite struct StaleFollowCLITests {
    let home = CLI.Home()
    var vault: String { home.path + "/Vault" }
    var bookmark: String { home.path + "/vault.bookmark" }
    static let app = "com.example.memo"

    init() throws {
        try FileManager.default.createDirectory(atPath: home.path + "/Vault", withIntermediateDirectories: true)
    }

    /// A folder moved into the app's container: `resolve --follow` and
    /// `run --on-stale follow` both refuse it, and neither rewrites the
    /// bookmark, which therefore still resolves moved (not fresh) next time.
    @Test func aFollowIntoTheContainersIsRefusedAndRewritesNothing() throws {
        #expect(try CLI.run(["pick", "--app", Self.app, "--select", vault, "-o", bookmark], home: home).status == 0)
        let before = try Data(contentsOf: URL(fileURLWithPath: bookmark))
        let containers = home.path + "/data/sandboxed-run/containers"
        try FileManager.default.createDirectory(atPath: containers, withIntermediateDirectories: true)
        #expect(rename(vault, containers + "/Vault") == 0)

        let followed = try CLI.run(["resolve", "--app", Self.app, "--follow", bookmark], home: home)
        #expect(followed.status == 125, "\(followed.stdout)")
        #expect(followed.stderr.contains("cannot grant \(containers)/Vault: it would expose sandboxed-run's own"), "\(followed.stderr)")
        let ran = try CLI.run(["run", "--app", Self.app, "--grant", "V=\(bookmark)", "--on-stale", "follow", "--", "/bin/true"], home: home)
        #expect(ran.status == 125)
        #expect(!ran.stderr.contains("bookmark rewritten"), "\(ran.stderr)")
        #expect(try Data(contentsOf: URL(fileURLWithPath: bookmark)) == before, "the bookmark was rewritten")
        let again = try CLI.run(["resolve", "--app", Self.app, bookmark], home: home)
        #expect(again.status == 10, "\(again.stdout)")
    }

    /// Every write of a bookmark syncs its folder once, through a descriptor
    /// that can be synced: no fsync fails (an O_PATH descriptor gives EBADF).
    @Test(.enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/strace"), "needs strace (scripts/install-deps), and root to trace"))
    func writingABookmarkSyncsItsFolderWithoutAFailedCall() throws {
        func traced(_ arguments: [String]) throws -> String {
            let log = home.path + "/strace-\(UUID().uuidString).log"
            let result = try CLI.program("/usr/bin/strace", ["-f", "-y", "-e", "trace=fsync,fdatasync", "-o", log, CLI.binary] + arguments, environment: home.environment)
            #expect(result.status == 0, "\(arguments): \(result.stderr)")
            return try String(contentsOfFile: log, encoding: .utf8)
        }
        let picked = try traced(["pick", "--app", Self.app, "--select", vault, "-o", bookmark])
        #expect(rename(vault, vault + "-moved") == 0)
        let followed = try traced(["resolve", "--app", Self.app, "--follow", bookmark])
        for (what, log) in [("pick", picked), ("resolve --follow", followed)] {
            let calls = log.split(separator: "\n").filter { $0.contains("fsync(") }
            #expect(!calls.contains { $0.contains("= -1") }, "\(what): \(calls.filter { $0.contains("= -1") })")
            #expect(calls.filter { $0.contains("fsync(") && $0.contains("<\(home.path)>") && $0.hasSuffix("= 0") }.count == 1,
                    "\(what): the bookmark's folder synced once: \(calls)")
        }
    }
}
