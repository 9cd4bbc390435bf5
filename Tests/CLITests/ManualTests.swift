import Foundation
import Testing

/// The man pages and shell completions in docs/ are made from the CLI's own
/// description (`scripts/man-pages`); a CLI change that did not regenerate
/// them fails here, as the generated filters and policies do.
@Suite struct ManualTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    static func committed(_ path: String) throws -> String {
        try String(contentsOf: repository.appendingPathComponent(path), encoding: .utf8)
    }

    @Test func theCommittedDescriptionIsTheCLIs() throws {
        let now = try CLI.run(["--experimental-dump-help"])
        #expect(now.status == 0)
        #expect(now.stdout == (try Self.committed("docs/man/cli.json")), "the CLI changed: run scripts/man-pages and commit docs/man and docs/completions")
    }

    @Test(arguments: [("bash", "sandboxed-run.bash"), ("zsh", "_sandboxed-run"), ("fish", "sandboxed-run.fish")])
    func theCommittedCompletionsAreTheCLIs(shell: String, file: String) throws {
        let now = try CLI.run(["--generate-completion-script", shell])
        #expect(now.status == 0)
        #expect(now.stdout == (try Self.committed("docs/completions/" + file)), "run scripts/man-pages and commit docs/completions")
    }

    @Test func everyCommandHasAManPage() throws {
        let pages = try FileManager.default.contentsOfDirectory(atPath: Self.repository.appendingPathComponent("docs/man").path)
        for command in ["sandboxed-run.1", "sandboxed-run.run.1", "sandboxed-run.pick.1", "sandboxed-run.append.1", "sandboxed-run.grants.revoke.1"] {
            #expect(pages.contains(command), "\(command) missing: run scripts/man-pages")
        }
    }

    /// `--version` says the version, and the commit only when it knows it.
    @Test func theVersionNamesTheCommitOnlyWhenItKnowsIt() throws {
        let plain = try CLI.run(["--version"])
        #expect(plain.status == 0)
        #expect(plain.stdout.range(of: #"^\d+\.\d+\.\d+ \(commit (unknown: not built by scripts/build-release from a git checkout|[0-9a-f]{12}(-dirty)?)\)\n$"#, options: .regularExpression) != nil, "\(plain.stdout)")
        let copy = NSTemporaryDirectory() + "sandboxed-run-version-" + UUID().uuidString
        try FileManager.default.copyItem(atPath: CLI.binary, toPath: copy)
        defer { try? FileManager.default.removeItem(atPath: copy) }
        let stamp = try CLI.program(Self.repository.appendingPathComponent("scripts/stamp-commit").path, [copy, "0123456789ab"])
        #expect(stamp.status == 0, "\(stamp)")
        let stamped = try CLI.program(copy, ["--version"])
        #expect(stamped.stdout.hasSuffix(" (commit 0123456789ab)\n"), "\(stamped.stdout)")
    }
}
