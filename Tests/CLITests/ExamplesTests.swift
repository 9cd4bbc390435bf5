import Foundation
import Testing

/// Examples/demo.sh shows each command as it runs it: the shown line, pasted
/// into bash, must be the same command, quotes and redirections included.
@Suite struct ExamplesTests {
    static let repository = ManualTests.repository.path

    /// demo.sh's own `run` and `run_from`, on commands whose words need quoting.
    @Test func theDemoEchoesCommandsThatCanBePastedBack() throws {
        let script = #"""
            eval "$(sed -n '/^# demo-echo-begin/,/^# demo-echo-end/p' Examples/demo.sh)"
            run_from Examples/hardcoded-path.py /usr/bin/sha256sum -
            run printf '[%s]\n' 'two words' "it's" '$HOME' '*' 'a
            b'
            run_from 'Examples/hardcoded-path.py' /bin/sh -c 'wc -c; echo "$0 $1"' 'x y' '<z>'
            """#
        let result = try CLI.program("/bin/bash", ["-c", "cd \(Self.repository) && " + script])
        #expect(result.status == 0, "\(result.stderr)")
        let lines = result.stdout.split(separator: "\n", omittingEmptySubsequences: false)
        // The shown lines, each with what the command printed after it.
        var shown: [(command: String, output: String)] = []
        for line in lines {
            if line.hasPrefix("$ ") { shown.append((String(line.dropFirst(2)), "")) } else if !shown.isEmpty {
                shown[shown.count - 1].output += (shown[shown.count - 1].output.isEmpty ? "" : "\n") + line
            }
        }
        #expect(shown.count == 3, "\(result.stdout)")
        #expect(shown.first?.command.hasSuffix(" < Examples/hardcoded-path.py") == true, "\(shown)")
        #expect(shown.last?.command.contains(" < ") == true, "\(shown)")
        for (command, output) in shown {
            #expect(!command.contains("\n"), "one line: \(command)")
            #expect(try CLI.program("/bin/bash", ["-n", "-c", command]).status == 0, "parses: \(command)")
            let pasted = try CLI.program("/bin/bash", ["-c", "cd \(Self.repository) && " + command])
            #expect(pasted.stdout.trimmingCharacters(in: .newlines) == output.trimmingCharacters(in: .newlines), "pasted back: \(command)")
        }
    }

    /// Every demo command with a redirected stdin goes through `run_from`,
    /// which shows the redirection (`run CMD < FILE` would hide it).
    @Test func everyDemoCommandWithARedirectionShowsIt() throws {
        let demo = try String(contentsOfFile: Self.repository + "/Examples/demo.sh", encoding: .utf8)
        let hidden = demo.split(separator: "\n").filter { $0.hasPrefix("run ") && $0.range(of: #"<\s*\S+\s*$"#, options: .regularExpression) != nil }
        #expect(hidden.isEmpty, "\(hidden)")
        #expect(demo.split(separator: "\n").contains { $0.hasPrefix("run_from Examples/hardcoded-path.py ") })
    }
}
