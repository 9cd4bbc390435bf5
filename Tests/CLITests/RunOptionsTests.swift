import Foundation
import Testing
import AppSandbox
@testable import sandboxed_run

/// `run`'s options are one table (`RunOptions.table`), read by one parser;
/// the ArgumentParser declarations only describe them for help, the man
/// page and completions, and must name exactly the same options.
@Suite struct RunOptionsTests {
    @Test func theDeclarationsForHelpNameExactlyTheTablesOptions() throws {
        let dump = try CLI.run(["--experimental-dump-help"])
        let root = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        let command = try #require(root["command"] as? [String: Any])
        let subcommands = try #require(command["subcommands"] as? [[String: Any]])
        let run = try #require(subcommands.first { $0["commandName"] as? String == "run" })
        let arguments = try #require(run["arguments"] as? [[String: Any]])
        var declared: [String: (takesValue: Bool, repeats: Bool)] = [:]
        for argument in arguments {
            guard let kind = argument["kind"] as? String, kind != "positional",
                  let preferred = argument["preferredName"] as? [String: Any], let name = preferred["name"] as? String,
                  name != "help", name != "version" else { continue }
            declared["--" + name] = (kind == "option", argument["isRepeating"] as? Bool ?? false)
        }
        let table = Dictionary(uniqueKeysWithValues: RunOptions.table.map { ($0.name, ($0.takesValue, $0.repeats)) })
        #expect(Set(declared.keys) == Set(table.keys))
        for (name, shape) in table {
            #expect(declared[name]?.takesValue == shape.0 && declared[name]?.repeats == shape.1, "\(name)")
        }
    }

    @Test func everyFormIsRead() throws {
        let parsed = try #require(try RunOptions.parse([
            "--app=com.example.memo", "--policy", "networked", "--report", "--best-effort", "--grant", "VAULT=v.bookmark",
            "--grant=NOTES=n.bookmark", "--keep-fd", "3", "--keep-fd=4", "--setenv", "A=b=c", "--setenv=X=", "--keep-env", "TERM",
            "--on-stale", "follow", "--on-missing", "prompt", "--chdir", "/tmp", "--explain", "--denials", "/tmp/d",
            "--denials-limit=16M", "--supervise-metadata", "--", "/bin/echo", "--app", "-h", "--",
        ][...]))
        #expect(parsed.app == "com.example.memo" && parsed.policy == "networked" && parsed.report && parsed.bestEffort)
        #expect(parsed.grants == ["VAULT=v.bookmark", "NOTES=n.bookmark"] && parsed.keptDescriptors == [3, 4])
        #expect(parsed.setEnvironment == ["A=b=c", "X="] && parsed.keptEnvironment == ["TERM"])
        #expect(parsed.onStale == .follow && parsed.onMissing == .prompt && parsed.workingDirectory == "/tmp")
        #expect(parsed.explain && parsed.denialsFile == "/tmp/d" && parsed.denialsLimit == "16M" && parsed.superviseMetadata)
        #expect(parsed.command == ["/bin/echo", "--app", "-h", "--"])
        // Without --, the command starts at the first word that is no option.
        let bare = try #require(try RunOptions.parse(["--app", "a", "/bin/echo", "--policy", "x"][...]))
        #expect(bare.command == ["/bin/echo", "--policy", "x"] && bare.policy == nil)
        #expect(try RunOptions.parse(["--app", "a", "--", "/bin/echo", "--", "x"][...])?.command == ["/bin/echo", "--", "x"])
    }

    @Test(arguments: [
        (["--app", "a", "--polciy", "x", "--", "c"], "unknown option '--polciy'"),
        (["--app", "a", "--unknown", "c"], "unknown option '--unknown'"),
        (["--app", "a", "--app", "b", "--", "c"], "--app given twice"),
        (["--policy=x", "--app", "a", "--policy", "y", "c"], "--policy given twice"),
        (["--app", "a", "--denials-limit", "1M", "--denials-limit", "2M", "--", "c"], "--denials-limit given twice"),
        (["--app", "--report", "--", "c"], "--app needs a value"),
        (["--app", "a", "--setenv", "-x", "--", "c"], "--setenv needs a value"),
        (["--app", "a", "--denials-limit"], "--denials-limit needs a value"),
        (["--app", "a", "--report=yes", "--", "c"], "--report takes no value"),
        (["--app", "a", "--keep-fd", "three", "--", "c"], "--keep-fd three: give a descriptor number"),
        (["--app", "a", "--keep-fd", "-1", "--", "c"], "--keep-fd needs a value"),
        (["--app", "a", "--on-stale", "sometimes", "--", "c"], "--on-stale sometimes: give one of fail, prompt, follow"),
        (["--policy", "x", "--", "c"], "--app is required"),
        (["--app", "a"], "no command given"),
        (["--app", "a", "stray", "--", "c"], "unexpected argument 'stray' before --"),
        (["--app", "a", "--"], "no command given"),
    ]) func everyMistakeIsAUsageErrorNamingIt(words: [String], says: String) throws {
        #expect {
            _ = try RunOptions.parse(words[...])
        } throws: { error in
            guard case SandboxError.usage(let message) = error else { return false }
            return message.contains(says)
        }
    }

    @Test func helpIsLeftToArgumentParser() throws {
        #expect(try RunOptions.parse(["--app", "a", "--help", "--", "c"][...]) == nil)
        #expect(try RunOptions.parse(["-h"][...]) == nil)
    }
}
